package quorum_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/quorum"
)

// semaphore returns l's semaphore name with permits permits.
func semaphore(t *testing.T, l *quorum.Locker, name string, permits int) lease.Semaphore {
	t.Helper()
	s, err := l.Semaphore(name, permits)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Twelve holders on three Lockers, three permits: never more than three
// hold at once, and the permits are used (three at once at some point).
func TestSemaphoreNeverOverAdmits(t *testing.T) {
	r := newRig(t)
	var inUse, most atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 12)
	for range 3 {
		s := semaphore(t, r.locker(t, quorum.WithTTL(slow(3*time.Second))), "sem:overadmit", 3)
		for range 4 {
			wg.Go(func() {
				for range 8 {
					le, err := s.Acquire(ctxT(t, slow(20*time.Second)))
					if err != nil {
						errs <- err
						return
					}
					n := inUse.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					time.Sleep(2 * time.Millisecond) // the work under the permit
					inUse.Add(-1)
					if err := le.Unlock(context.Background()); err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if m := most.Load(); m > 3 {
		t.Fatalf("%d holders at once with 3 permits", m)
	}
	t.Logf("at most %d holders at once", most.Load())
}

func TestSemaphoreTryAcquireWhenFull(t *testing.T) {
	r := newRig(t)
	s := semaphore(t, r.locker(t), "sem:full", 2)
	a, err := s.TryAcquire(ctxT(t, slow(5*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.TryAcquire(ctxT(t, slow(5*time.Second)))
	if err != nil {
		t.Fatal("the second permit:", err)
	}
	if a.Key() == b.Key() {
		t.Fatalf("two holders of permit %q", a.Key())
	}
	other := semaphore(t, r.locker(t), "sem:full", 2)
	if _, err := other.TryAcquire(ctxT(t, slow(5*time.Second))); !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("a third holder of 2 permits: got %v, want ErrNotAcquired", err)
	}
	if err := a.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	c, err := other.TryAcquire(ctxT(t, slow(5*time.Second)))
	if err != nil {
		t.Fatal("the freed permit:", err)
	}
	if c.Key() != a.Key() {
		t.Fatalf("took %q, the free permit is %q", c.Key(), a.Key())
	}
}

func TestSemaphorePermitsAreFixedPerName(t *testing.T) {
	r := newRig(t)
	l := r.locker(t)
	le, err := semaphore(t, l, "sem:count", 2).TryAcquire(ctxT(t, slow(5*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	defer le.Unlock(context.Background())
	for _, n := range []int{1, 3} {
		if _, err := semaphore(t, r.locker(t), "sem:count", n).TryAcquire(ctxT(t, slow(5*time.Second))); !errors.Is(err, lease.ErrPermitsMismatch) {
			t.Errorf("%d permits on a semaphore of 2: got %v, want ErrPermitsMismatch", n, err)
		}
	}
	for _, n := range []int{0, -1, quorum.MaxPermits + 1} {
		if _, err := l.Semaphore("sem:bad", n); err == nil {
			t.Errorf("%d permits: no error", n)
		}
	}
	if _, err := l.Semaphore("", 1); err == nil {
		t.Error("an empty name: no error")
	}
}

// A waiter is woken by a release, not its backoff: with a backoff of a
// minute it still gets the permit; the waiters of one Locker go oldest first.
func TestSemaphoreWaitersWokenOldestFirst(t *testing.T) {
	r := newRig(t)
	holder := semaphore(t, r.locker(t), "sem:wake", 1)
	le, err := holder.TryAcquire(ctxT(t, slow(5*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	l := r.locker(t, quorum.WithRetry(quorum.Retry{BaseDelay: time.Minute, MaxDelay: time.Minute}), quorum.WithMaxWait(slow(30*time.Second)))
	s := semaphore(t, l, "sem:wake", 1)
	got := make(chan int, 2)
	leases := make(chan lease.Lease, 2)
	for i := range 2 {
		go func() {
			le, err := s.Acquire(ctxT(t, slow(30*time.Second)))
			if err != nil {
				t.Error(err)
				got <- -1
				return
			}
			got <- i
			leases <- le
		}()
		key := quorum.PermitKey("sem:wake", 0)
		eventually(t, 5*time.Second, "the waiter queues", func() bool { return l.Waiting(key) == i+1 && l.SubscribedBy(key) == 5 })
	}
	if err := le.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if first := <-got; first != 0 {
		t.Fatalf("waiter %d went first", first)
	}
	if err := (<-leases).Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if second := <-got; second != 1 {
		t.Fatalf("waiter %d went second", second)
	}
	if err := (<-leases).Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Each permit has its own fence, greater each time the permit is taken.
func TestSemaphorePermitFences(t *testing.T) {
	r := newRig(t)
	s := semaphore(t, r.locker(t, quorum.WithFencer(&memFencer{})), "sem:fence", 1)
	var last int64
	for range 3 {
		le, err := s.TryAcquire(ctxT(t, slow(5*time.Second)))
		if err != nil {
			t.Fatal(err)
		}
		if f := le.FenceOf(quorum.PermitKey("sem:fence", 0)); f <= last || le.Fence() != f {
			t.Fatalf("fence %d (Fence %d) after %d", f, le.Fence(), last)
		}
		last = le.Fence()
		if err := le.Unlock(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSemaphoreDo(t *testing.T) {
	r := newRig(t)
	s := semaphore(t, r.locker(t), "sem:do", 1)
	ran := false
	err := s.Do(ctxT(t, slow(5*time.Second)), func(ctx context.Context, le lease.Lease) error {
		ran = true
		if _, err := s.TryAcquire(ctx); !errors.Is(err, lease.ErrNotAcquired) {
			t.Errorf("a second holder inside Do: %v", err)
		}
		return nil
	})
	if err != nil || !ran {
		t.Fatalf("Do: %v (ran %v)", err, ran)
	}
	le, err := s.TryAcquire(ctxT(t, slow(5*time.Second)))
	if err != nil {
		t.Fatal("Do did not release its permit:", err)
	}
	_ = le.Unlock(context.Background())
	if err := s.Do(ctxT(t, time.Second), nil); err == nil {
		t.Fatal("Do with a nil fn: no error")
	}
}
