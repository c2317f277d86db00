package etcdlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quorumlock/quorumlock/lease"
)

// memFencer issues 1, 2, 3... per key, and remembers the keys it was
// asked for.
type memFencer struct {
	mu   sync.Mutex
	next map[string]int64
}

// Next returns key's next token.
func (f *memFencer) Next(_ context.Context, key string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.next == nil {
		f.next = map[string]int64{}
	}
	f.next[key]++
	return f.next[key], nil
}

// last returns the last token issued for key (0 for none).
func (f *memFencer) last(key string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.next[key]
}

// got is the outcome of a call made in the background.
type got struct {
	le  lease.Lease
	err error
}

// later runs f in the background; its outcome arrives on the channel. A
// lease it is granted is unlocked when the test ends.
func later(t *testing.T, f func(ctx context.Context) (lease.Lease, error)) <-chan got {
	t.Helper()
	ch := make(chan got, 1)
	go func() {
		le, err := f(ctxT(t))
		ch <- got{le, err}
	}()
	return ch
}

// await waits up to d for g's outcome and fails the test on an error or
// when none comes. The lease is unlocked when the test ends.
func await(t *testing.T, g <-chan got, d time.Duration) lease.Lease {
	t.Helper()
	select {
	case r := <-g:
		if r.err != nil {
			t.Fatalf("granted nothing: %v", r.err)
		}
		t.Cleanup(func() { _ = r.le.Unlock(context.Background()) })
		return r.le
	case <-time.After(d):
		t.Fatalf("no grant within %v", d)
	}
	return nil
}

// pending fails the test when g already has an outcome.
func pending(t *testing.T, g <-chan got, what string) {
	t.Helper()
	select {
	case r := <-g:
		if r.err == nil {
			_ = r.le.Unlock(context.Background())
		}
		t.Fatalf("%s: answered (error %v) while it should wait", what, r.err)
	default:
	}
}

// waitFor polls cond every few milliseconds until it holds, failing the
// test after 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%s: not within 10s", what)
		}
	}
}

// countKeys returns how many etcd keys start with prefix.
func countKeys(t *testing.T, admin *clientv3.Client, prefix string) int64 {
	t.Helper()
	resp, err := admin.Get(ctxT(t), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// mustHeld fails the test unless le is held.
func mustHeld(t *testing.T, le lease.Lease) {
	t.Helper()
	select {
	case <-le.Lost():
		t.Fatalf("lease %s lost: %v", le.Key(), le.Err())
	default:
	}
}

// mustLose waits up to d for le's Lost and checks that Err matches want.
func mustLose(t *testing.T, le lease.Lease, want error, d time.Duration) {
	t.Helper()
	select {
	case <-le.Lost():
	case <-time.After(d):
		t.Fatalf("lease %s not lost within %v", le.Key(), d)
	}
	if err := le.Err(); !errors.Is(err, want) {
		t.Fatalf("lease %s: Err %v, want %v", le.Key(), err, want)
	}
}
