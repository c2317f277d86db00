package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// runAllRig runs runAll on a loopback listener with handler h and the given
// runners; result receives runAll's error.
func runAllRig(t *testing.T, ctx context.Context, wait time.Duration, h http.Handler, rs []runner) (base string, result <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reqBase, cancelBase := context.WithCancel(context.Background())
	t.Cleanup(cancelBase)
	srv := newServer(reqBase, h)
	done := make(chan error, 1)
	go func() { done <- runAll(ctx, wait, srv, ln, cancelBase, rs, slog.New(slog.DiscardHandler)) }()
	return "http://" + ln.Addr().String(), done
}

// happenings records what happened, in order.
type happenings struct {
	mu  sync.Mutex
	got []string
}

func (e *happenings) add(s string) { e.mu.Lock(); e.got = append(e.got, s); e.mu.Unlock() }

func (e *happenings) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return strings.Join(e.got, ",")
}

// recorder is a runner that notes when its context ends.
func recorder(ev *happenings) runner {
	return runner{name: "recorder", run: func(ctx context.Context) error {
		<-ctx.Done()
		ev.add("runner stopped")
		return ctx.Err()
	}}
}

func waitResult(t *testing.T, result <-chan error) error {
	t.Helper()
	select {
	case err := <-result:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("runAll did not return")
		return nil
	}
}

// A graceful stop: the request in flight finishes, and only then do the
// runners stop; runAll returns nil once all have ended.
func TestRunAllDrainsBeforeStoppingRunners(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ev happenings
	entered := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		time.Sleep(200 * time.Millisecond)
		ev.add("request done")
		_, _ = io.WriteString(w, "ok")
	})
	base, result := runAllRig(t, ctx, 5*time.Second, h, []runner{recorder(&ev)})
	got := make(chan int, 1)
	go func() {
		resp, err := http.Get(base)
		if err != nil {
			got <- 0
			return
		}
		_ = resp.Body.Close()
		got <- resp.StatusCode
	}()
	<-entered
	cancel()
	if err := waitResult(t, result); err != nil {
		t.Fatalf("runAll: %v", err)
	}
	if code := <-got; code != http.StatusOK {
		t.Fatalf("the request in flight got %d", code)
	}
	if ev.String() != "request done,runner stopped" {
		t.Fatalf("order: %s, want the request done before the runner stopped", ev.String())
	}
}

// A request that outlives the shutdown wait has its context cancelled and
// runAll says so; the runners still stop after it.
func TestRunAllCutsOffAfterTheWait(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ev happenings
	entered := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-r.Context().Done()
		ev.add("request cancelled")
	})
	base, result := runAllRig(t, ctx, 100*time.Millisecond, h, []runner{recorder(&ev)})
	go func() {
		if resp, err := http.Get(base); err == nil {
			_ = resp.Body.Close()
		}
	}()
	<-entered
	cancel()
	err := waitResult(t, result)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "shutdown") {
		t.Fatalf("runAll: %v, want the shutdown's deadline", err)
	}
	// Both happen: the handler's context is cancelled once the wait runs
	// out, and the runner is stopped once the server is closed.
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(ev.String(), "request cancelled") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(ev.String(), "request cancelled") || !strings.Contains(ev.String(), "runner stopped") {
		t.Fatalf("happenings: %s", ev.String())
	}
}

// A runner that fails stops the daemon: the server shuts down, the others
// stop, and runAll returns the runner's error, named.
func TestRunAllStopsWhenARunnerFails(t *testing.T) {
	var ev happenings
	boom := errors.New("boom")
	failing := runner{name: "failing", run: func(context.Context) error { return boom }}
	_, result := runAllRig(t, context.Background(), time.Second, http.NotFoundHandler(), []runner{recorder(&ev), failing})
	err := waitResult(t, result)
	if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "failing: ") {
		t.Fatalf("runAll: %v, want the failing runner's error", err)
	}
	if ev.String() != "runner stopped" {
		t.Fatalf("happenings: %s", ev.String())
	}
}
