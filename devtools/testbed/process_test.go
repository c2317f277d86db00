package testbed

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPauseReturnsOnceEveryThreadStopped: a paused local server must not
// answer once Pause has returned, so pause waits until every thread of the
// process is stopped, not only until SIGSTOP is queued (a loaded machine
// once let a paused etcd answer a read 375µs after Pause returned).
func TestPauseReturnsOnceEveryThreadStopped(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is needed (make deps): %v", err)
	}
	// redis-server runs background threads beside its main one.
	dir := t.TempDir()
	p, err := startProc([]string{bin, "--port", "0", "--unixsocket", filepath.Join(dir, "sock"), "--save", "", "--io-threads", "4"}, nil, filepath.Join(dir, "log"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop(syscall.SIGKILL, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < 20; i++ {
		if err := p.pause(ctx); err != nil {
			t.Fatal(err)
		}
		ok, err := p.stopped()
		if err != nil || !ok {
			t.Fatalf("round %d: pause returned with a thread still running (stopped=%v, err=%v)", i, ok, err)
		}
		if err := p.signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	if ok, _ := p.stopped(); ok {
		t.Fatal("the process reads as stopped after SIGCONT: stopped() cannot tell")
	}
}

// TestTailFromLeavesEarlierStarts: the log a failed start is judged by
// holds that start's lines only, so an "address already in use" of an
// earlier start cannot send a later, different failure into port retries.
func TestTailFromLeavesEarlierStarts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	first := "bind: address already in use\n"
	if err := os.WriteFile(path, []byte(first+"Bad file format reading the append only file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := tailFrom(path, int64(len(first)), 1500); strings.Contains(got, "address already in use") || !strings.Contains(got, "append only file") {
		t.Fatalf("tailFrom past the first start: %q", got)
	}
	if got := tail(path, 1500); !strings.Contains(got, "address already in use") {
		t.Fatalf("tail of the whole log lost its first line: %q", got)
	}
}

// TestReadinessProbeKnowsItsOwnRedis: a Redis of another node on the port
// the bed chose is not the node's server coming up.
func TestReadinessProbeKnowsItsOwnRedis(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is needed (make deps): %v", err)
	}
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	mine, other := t.TempDir(), t.TempDir()
	p, err := startProc([]string{bin, "--port", strconv.Itoa(ports[0]), "--bind", "127.0.0.1", "--dir", other, "--save", ""}, nil, filepath.Join(other, "log"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop(syscall.SIGKILL, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addrs := []string{loopback(ports[0])}
	for pingRedis(ctx, addrs, other) != nil {
		if err := sleepCtx(ctx, 10*time.Millisecond); err != nil {
			t.Fatalf("the other Redis never answered: %v", err)
		}
	}
	if err := pingRedis(ctx, addrs, mine); err == nil || !strings.Contains(err.Error(), "another server holds the port") {
		t.Fatalf("the probe took another node's Redis for the node's own: %v", err)
	}
}
