package testbed

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// echoServer is a loopback TCP server that writes back what it reads: a
// real upstream for the proxy, with nothing else in the way.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// proxyGoroutines returns the stacks of live goroutines running toxiproxy
// code.
func proxyGoroutines() []string {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "toxiproxy") {
			out = append(out, g)
		}
	}
	return out
}

// A partition healed while clients keep writing on connections that lived
// through it must not strand a proxy goroutine: every link the proxy ran
// ends once its connection is gone. Clients do exactly this after a fault:
// a pooled connection is reused (a PING, a retried command) right when the
// partition ends.
func TestProxyHealLeavesNoGoroutine(t *testing.T) {
	up := echoServer(t)
	p, err := newNodeProxy("leak", up)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const rounds = 30
	for round := range rounds {
		var conns []net.Conn
		for range 4 {
			c, err := net.Dial("tcp", p.addr())
			if err != nil {
				t.Fatal(err)
			}
			// The link is established once a byte went through both ways.
			if _, err := c.Write([]byte("a")); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
				t.Fatalf("round %d: echo through the proxy: %v", round, err)
			}
			conns = append(conns, c)
		}
		if err := p.partition(); err != nil {
			t.Fatal(err)
		}
		// Writers keep sending through the partition and its heal, until
		// the proxy closes their connections (or a bound of time passes).
		var wg sync.WaitGroup
		for _, c := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				deadline := time.Now().Add(5 * time.Second)
				for time.Now().Before(deadline) {
					if _, err := c.Write([]byte("b")); err != nil {
						return
					}
					time.Sleep(50 * time.Microsecond)
				}
			}()
		}
		time.Sleep(2 * time.Millisecond)
		p.heal(ctx)
		for _, c := range conns {
			// Read until the proxy closes the connection.
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err := io.Copy(io.Discard, c)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("round %d: the proxy kept a connection that lived through the partition open", round)
			}
		}
		wg.Wait()
		for _, c := range conns {
			_ = c.Close()
		}
	}
	p.stop()
	// Links end asynchronously once their connections are closed: wait
	// for that event, with a bound.
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := proxyGoroutines()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d proxy goroutines still running after every connection closed:\n%s", len(left), strings.Join(left[:min(len(left), 4)], "\n\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
