package testbed

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// node is one server of the bed, Redis, etcd or Postgres, on either
// provider: its lifecycle (start, pause, resume, kill, restart with or
// without data), its state and its addresses. A loopback proxy stands in
// front of each of its ports, so its Addr stays the same for the life of
// the bed, across kills and restarts. What it runs is its server
// description; how, its provider's runner.
type node struct {
	srv server
	run runner
	// front holds one proxy per port, or none for a server reached
	// directly (Postgres).
	front []*nodeProxy

	// dataMu serialises what starts the server or works on its data
	// directory: restarts, snapshots, cutting the AOF.
	dataMu sync.Mutex

	mu      sync.Mutex
	ports   []int    // the loopback ports of the last start
	direct  []string // the server's own addresses, bypassing the proxies
	running bool
	paused  bool
	closed  bool
	links   []*Link
}

// newNode picks the node's first ports and, when proxied, starts a proxy
// in front of each; the node gets its server and runner before its first
// start.
func newNode(name string, ports int, proxied bool) (*node, error) {
	first, err := freePorts(ports)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	n := &node{srv: server{name: name}, ports: first}
	for i, port := range first {
		n.direct = append(n.direct, loopback(port))
		if !proxied {
			continue
		}
		pname := name
		if i > 0 {
			pname = fmt.Sprintf("%s-%d", name, i)
		}
		px, err := newNodeProxy(pname, n.direct[i])
		if err != nil {
			n.stopProxies()
			return nil, err
		}
		n.front = append(n.front, px)
	}
	return n, nil
}

func loopback(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }

// Name is the node's name in the bed: redis1, etcd2, postgres, ...
func (n *node) Name() string { return n.srv.name }

// Addr is the address clients use: a loopback listener in front of the
// node's (first) port, or the server's own address when it has no proxy.
func (n *node) Addr() string {
	if len(n.front) > 0 {
		return n.front[0].addr()
	}
	return n.DirectAddr()
}

// DirectAddr is the server's own (client) address, bypassing the proxy:
// faults injected with Partition and AddLatency do not apply to it, and it
// may change when a restart replaces the server.
func (n *node) DirectAddr() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.direct[0]
}

// state returns whether the server runs and whether it is paused.
func (n *node) state() (running, paused bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.running, n.paused
}

// start starts the server, with its data directory as mode says, waits
// until it serves, and points the proxies and links at it. A start whose
// ports were taken since they were picked is retried on new ones.
func (n *node) start(ctx context.Context, mode dataMode) error {
	ctx, cancel := context.WithTimeout(ctx, n.srv.startTimeout)
	defer cancel()
	if mode == dataWipe {
		if err := resetDir(n.srv.dataDir()); err != nil {
			return err
		}
	}
	n.mu.Lock()
	ports := n.ports
	n.mu.Unlock()
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		if attempt > 0 {
			var err error
			if ports, err = freePorts(n.srv.ports); err != nil {
				return err
			}
		}
		addrs, err := n.run.start(ctx, ports, mode)
		if err == nil {
			if err = n.waitReady(ctx, addrs); err == nil {
				return n.started(ports, addrs)
			}
		}
		log := n.run.log(1500)
		_ = n.run.kill(context.WithoutCancel(ctx))
		last = fmt.Errorf("%w\n%s", err, log)
		if ctx.Err() != nil || !strings.Contains(strings.ToLower(log), "address already in use") {
			break
		}
	}
	return last
}

// waitReady probes the server until it serves, it exits, or ctx ends.
func (n *node) waitReady(ctx context.Context, addrs []string) error {
	var last error
	for {
		if err := n.run.exited(ctx); err != nil {
			return fmt.Errorf("%s exited during start: %w (last: %v)", n.srv.kind, err, last)
		}
		if last = n.srv.probe(ctx, addrs); last == nil {
			return nil
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return fmt.Errorf("%s at %s not ready: %w (last: %v)", n.srv.kind, strings.Join(addrs, ", "), err, last)
		}
	}
}

// started records a running server at addrs and repoints the proxies and
// links. The links are read under the lock link holds while it creates
// one, after addrs is stored, so a link made during a restart is either
// repointed here or created with the new address.
func (n *node) started(ports []int, addrs []string) error {
	n.mu.Lock()
	n.ports, n.direct, n.running, n.paused = ports, addrs, true, false
	links := append([]*Link(nil), n.links...)
	n.mu.Unlock()
	var errs []error
	for i, px := range n.front {
		if err := px.setUpstream(addrs[i]); err != nil {
			errs = append(errs, fmt.Errorf("repoint proxy: %w", err))
		}
	}
	for _, l := range links {
		if err := l.proxy.setUpstream(addrs[0]); err != nil {
			errs = append(errs, fmt.Errorf("repoint link %s: %w", l.name, err))
		}
	}
	return errors.Join(errs...)
}

// Pause freezes the server (SIGSTOP, or docker pause): it keeps its
// connections but answers nothing, to clients or peers, until Resume.
func (n *node) Pause(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.running {
		return fmt.Errorf("%s: pause: not running", n.srv.name)
	}
	if err := n.run.pause(ctx); err != nil {
		// The stop may have half happened: thaw it, so that a failed Pause
		// never leaves a frozen server that Resume would not touch.
		if rerr := n.run.resume(context.WithoutCancel(ctx)); rerr != nil {
			err = errors.Join(err, fmt.Errorf("thaw after the failed pause: %w", rerr))
		}
		return fmt.Errorf("%s: pause: %w", n.srv.name, err)
	}
	n.paused = true
	return nil
}

// Resume thaws a paused server.
func (n *node) Resume(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.paused {
		return nil
	}
	if err := n.run.resume(ctx); err != nil {
		return fmt.Errorf("%s: resume: %w", n.srv.name, err)
	}
	n.paused = false
	return nil
}

// Kill ends the server with SIGKILL: no shutdown, no last save. Its data
// directory stays.
func (n *node) Kill(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.running {
		return nil
	}
	if err := n.run.kill(ctx); err != nil {
		return fmt.Errorf("%s: kill: %w", n.srv.name, err)
	}
	n.running, n.paused = false, false
	return nil
}

// restart kills the server if it runs and starts it again in mode, behind
// the same addresses.
func (n *node) restart(ctx context.Context, mode dataMode) error {
	n.dataMu.Lock()
	defer n.dataMu.Unlock()
	if err := n.Kill(ctx); err != nil {
		return err
	}
	n.mu.Lock()
	closed := n.closed
	n.mu.Unlock()
	if closed {
		return fmt.Errorf("%s: restart: %w", n.srv.name, errClosed)
	}
	if err := n.start(ctx, mode); err != nil {
		return fmt.Errorf("%s: restart: %w", n.srv.name, err)
	}
	return nil
}

// errClosed: the node was closed; it starts no server again.
var errClosed = errors.New("the node is closed")

// close stops the proxies, the links and the server.
func (n *node) close(ctx context.Context) error {
	n.stopProxies()
	n.mu.Lock()
	paused, run := n.paused, n.run
	n.closed = true
	links := n.links
	n.links = nil
	n.mu.Unlock()
	for _, l := range links {
		l.proxy.stop()
	}
	if run == nil {
		return nil
	}
	var errs []error
	if paused {
		errs = append(errs, run.resume(ctx))
	}
	errs = append(errs, run.close(ctx))
	return errors.Join(errs...)
}

func (n *node) stopProxies() {
	for _, px := range n.front {
		px.stop()
	}
}
