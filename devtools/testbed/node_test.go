package testbed

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fakeRunner plays a runner without servers: each start takes its outcome
// from a script, and it records what the node asked of it.
type fakeRunner struct {
	mu     sync.Mutex
	logs   []string // the log of each start that fails; "" for one that works
	starts [][]int  // the ports of each start
	modes  []dataMode
	failed bool // the last start failed
	calls  []string
	// pauseErr, when set, is what pause returns (after recording it).
	pauseErr error
}

func (r *fakeRunner) start(_ context.Context, ports []int, mode dataMode) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.starts = append(r.starts, slices.Clone(ports))
	r.modes = append(r.modes, mode)
	r.failed = len(r.logs) >= len(r.starts) && r.logs[len(r.starts)-1] != ""
	addrs := make([]string, len(ports))
	for i, p := range ports {
		addrs[i] = loopback(p)
	}
	return addrs, nil
}

func (r *fakeRunner) exited(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failed {
		return errors.New("exited")
	}
	return nil
}

func (r *fakeRunner) log(int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.logs[len(r.starts)-1]
}

func (r *fakeRunner) record(call string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, call)
	return nil
}

func (r *fakeRunner) pause(context.Context) error {
	_ = r.record("pause")
	return r.pauseErr
}
func (r *fakeRunner) resume(context.Context) error { return r.record("resume") }
func (r *fakeRunner) kill(context.Context) error   { return r.record("kill") }
func (r *fakeRunner) close(context.Context) error  { return r.record("close") }

// fakeNode is a proxied node of two ports on r.
func fakeNode(t *testing.T, r *fakeRunner) *node {
	t.Helper()
	n, err := newNode("fake1", 2, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.close(context.Background()) })
	n.srv = server{name: "fake1", kind: "fake", dir: t.TempDir(), ports: 2, stop: syscall.SIGKILL,
		probe: func(context.Context, []string) error { return nil }, startTimeout: 5 * time.Second}
	n.run = r
	return n
}

func TestNodeStartRetriesTakenPorts(t *testing.T) {
	r := &fakeRunner{logs: []string{"bind: Address already in use", ""}}
	n := fakeNode(t, r)
	first := slices.Clone(n.ports)
	if err := n.start(context.Background(), dataKeep); err != nil {
		t.Fatal(err)
	}
	if len(r.starts) != 2 || !slices.Equal(r.starts[0], first) || slices.Equal(r.starts[1], first) {
		t.Fatalf("starts on %v, first ports %v: want the first ports, then new ones", r.starts, first)
	}
	if got, want := n.DirectAddr(), loopback(r.starts[1][0]); got != want {
		t.Fatalf("DirectAddr %s, want %s", got, want)
	}
}

func TestNodeStartFailsOnOtherErrors(t *testing.T) {
	r := &fakeRunner{logs: []string{"FATAL: bad config", ""}}
	n := fakeNode(t, r)
	err := n.start(context.Background(), dataKeep)
	if err == nil || !strings.Contains(err.Error(), "bad config") || len(r.starts) != 1 {
		t.Fatalf("start = %v after %d starts; want the log in the error, and no retry", err, len(r.starts))
	}
	if running, _ := n.state(); running {
		t.Fatal("a node whose start failed counts as running")
	}
}

func TestNodeLifecycle(t *testing.T) {
	r := &fakeRunner{}
	n := fakeNode(t, r)
	ctx := context.Background()
	if err := n.Pause(ctx); err == nil {
		t.Fatal("Pause before the first start succeeded")
	}
	if err := n.start(ctx, dataWipe); err != nil {
		t.Fatal(err)
	}
	l, err := n.link("client-a")
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(n.Pause(ctx), n.Resume(ctx), n.Resume(ctx), n.Pause(ctx)); err != nil {
		t.Fatal(err)
	}
	// A restart kills the paused server (no resume needed) and starts it
	// in the mode asked, behind the same proxies and links.
	addr, laddr := n.Addr(), l.Addr()
	if err := n.restart(ctx, dataKeep); err != nil {
		t.Fatal(err)
	}
	if want := []string{"pause", "resume", "pause", "kill"}; !slices.Equal(r.calls, want) {
		t.Fatalf("runner calls %v, want %v", r.calls, want)
	}
	if want := []dataMode{dataWipe, dataKeep}; !slices.Equal(r.modes, want) {
		t.Fatalf("start modes %v, want %v", r.modes, want)
	}
	if running, paused := n.state(); !running || paused || n.Addr() != addr || l.Addr() != laddr {
		t.Fatalf("after restart: running %v paused %v, addr %s (was %s), link %s (was %s)", running, paused, n.Addr(), addr, l.Addr(), laddr)
	}
	if err := n.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.Kill(ctx); err != nil || len(r.calls) != 5 {
		t.Fatalf("a second Kill: %v, calls %v; want nothing sent", err, r.calls)
	}
	if err := n.close(ctx); err != nil || r.calls[len(r.calls)-1] != "close" {
		t.Fatalf("close: %v, calls %v", err, r.calls)
	}
	if _, err := n.link("client-b"); err == nil {
		t.Fatal("a link made after close")
	}
}

// TestNodeFailedPauseThaws: a pause that failed part way (SIGSTOP sent,
// the threads not seen stopped in time) must not leave a frozen server
// that Resume would skip: the node thaws it and stays running, not paused;
// a restart after close starts nothing.
func TestNodeFailedPauseThaws(t *testing.T) {
	r := &fakeRunner{pauseErr: errors.New("not every thread stopped")}
	n := fakeNode(t, r)
	ctx := context.Background()
	if err := n.start(ctx, dataWipe); err != nil {
		t.Fatal(err)
	}
	if err := n.Pause(ctx); err == nil {
		t.Fatal("a failed pause reported success")
	}
	if want := []string{"pause", "resume"}; !slices.Equal(r.calls, want) {
		t.Fatalf("runner calls %v, want %v (thawed after the failed pause)", r.calls, want)
	}
	if running, paused := n.state(); !running || paused {
		t.Fatalf("after a failed pause: running %v paused %v, want running and not paused", running, paused)
	}
	if err := n.close(ctx); err != nil {
		t.Fatal(err)
	}
	starts := len(r.starts)
	if err := n.restart(ctx, dataKeep); !errors.Is(err, errClosed) || len(r.starts) != starts {
		t.Fatalf("restart after close: %v, %d starts (was %d); want errClosed and none", err, len(r.starts), starts)
	}
}
