package locktest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/lease"
)

func (s suite) unlockEndsTheLeaseOnce(t *testing.T) {
	l := s.locker(t, time.Minute)
	le := must(t)(l.Lock(ctxT(t, time.Minute), t.Name()))
	if err := le.Err(); err != nil {
		t.Fatalf("Err of a held lease: %v", err)
	}
	if err := le.Unlock(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-le.Lost():
	default:
		t.Fatal("Lost is open after Unlock")
	}
	if !errors.Is(le.Err(), lease.ErrReleased) {
		t.Fatalf("Err after Unlock: %v, want ErrReleased", le.Err())
	}
	if err := le.Unlock(ctxT(t, time.Minute)); err != nil {
		t.Fatalf("a second Unlock: %v", err)
	}
}

// fencesIncrease: successive holders of a key, on several Lockers, get
// strictly increasing fences, for single and multi-key leases alike.
func (s suite) fencesIncrease(t *testing.T) {
	ls := []lease.Locker{s.locker(t, time.Minute), s.locker(t, time.Minute)}
	k, other := t.Name()+":a", t.Name()+":b"
	var last, lastOther int64
	for i := range 8 {
		var le lease.Lease
		if i%3 == 2 {
			le = must(t)(ls[i%2].LockMulti(ctxT(t, time.Minute), other, k))
			if f := le.FenceOf(other); f <= lastOther {
				t.Fatalf("holder %d: fence %d of %s after %d", i, f, other, lastOther)
			}
			lastOther = le.FenceOf(other)
		} else {
			le = must(t)(ls[i%2].Lock(ctxT(t, time.Minute), k))
		}
		if f := le.FenceOf(k); f <= last || (le.Key() == k && le.Fence() != f) {
			t.Fatalf("holder %d: fence %d (Fence %d) after %d", i, f, le.Fence(), last)
		}
		last = le.FenceOf(k)
		if err := le.Unlock(ctxT(t, time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
}

func (s suite) lockGivesUp(t *testing.T) {
	a, b := s.locker(t, time.Minute), s.locker(t, time.Second)
	held := must(t)(a.Lock(ctxT(t, time.Minute), t.Name()))
	start := time.Now()
	_, err := b.Lock(ctxT(t, time.Minute), t.Name())
	if !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("Lock of a key held past the wait: %v, want ErrNotAcquired", err)
	}
	if d := time.Since(start); d < time.Second || d > 30*time.Second {
		t.Fatalf("Lock gave up after %v, want the 1s wait", d)
	}
	if err := held.Unlock(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	got := must(t)(b.Lock(ctxT(t, time.Minute), t.Name()))
	_ = got.Unlock(ctxT(t, time.Minute))
}

func (s suite) contextError(t *testing.T) {
	a, b := s.locker(t, time.Minute), s.locker(t, time.Minute)
	held := must(t)(a.Lock(ctxT(t, time.Minute), t.Name()))
	defer func() { _ = held.Unlock(ctxT(t, time.Minute)) }()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	if _, err := b.Lock(ctx, t.Name()); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock cancelled while waiting: %v, want context.Canceled", err)
	}
}

func (s suite) extendKeeps(t *testing.T) {
	l := s.locker(t, time.Minute)
	le := must(t)(l.Lock(ctxT(t, time.Minute), t.Name()))
	defer func() { _ = le.Unlock(ctxT(t, time.Minute)) }()
	before := le.Until()
	time.Sleep(10 * time.Millisecond)
	if err := le.Extend(ctxT(t, time.Minute), s.b.TTL); err != nil {
		t.Fatal(err)
	}
	if !le.Until().After(before) || le.Err() != nil {
		t.Fatalf("Until %v after Extend, was %v; Err %v", le.Until(), before, le.Err())
	}
}

func (s suite) forgottenIsLost(t *testing.T) {
	l := s.locker(t, time.Minute)
	le := must(t)(l.LockMulti(ctxT(t, time.Minute), t.Name()+":a", t.Name()+":b"))
	s.b.Drop(t, le)
	if err := le.Extend(ctxT(t, time.Minute), s.b.TTL); !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("Extend of a forgotten lease: %v, want ErrLeaseLost", err)
	}
	select {
	case <-le.Lost():
	case <-time.After(time.Minute):
		t.Fatal("Lost still open after the loss")
	}
	if !errors.Is(le.Err(), lease.ErrLeaseLost) {
		t.Fatalf("Err %v, want ErrLeaseLost", le.Err())
	}
	_ = le.Unlock(ctxT(t, time.Minute))
	// The keys are free for the next owner.
	got := must(t)(s.locker(t, time.Minute).TryLockMulti(ctxT(t, time.Minute), t.Name()+":b", t.Name()+":a"))
	_ = got.Unlock(ctxT(t, time.Minute))
}

func (s suite) doRunsAndReleases(t *testing.T) {
	l := s.locker(t, time.Minute)
	ran := false
	err := l.Do(ctxT(t, time.Minute), t.Name(), func(ctx context.Context, le lease.Lease) error {
		ran = le.Key() == t.Name() && le.Err() == nil
		return errors.New("fn failed")
	})
	if !ran || err == nil || err.Error() != "fn failed" {
		t.Fatalf("Do: ran %v, err %v; want fn run with its lease and its error returned", ran, err)
	}
	got := must(t)(s.locker(t, time.Minute).TryLock(ctxT(t, time.Minute), t.Name()))
	_ = got.Unlock(ctxT(t, time.Minute))
}

func (s suite) doCancelsOnLoss(t *testing.T) {
	l := s.locker(t, time.Minute)
	err := l.Do(ctxT(t, 2*time.Minute), t.Name(), func(ctx context.Context, le lease.Lease) error {
		s.b.Drop(t, le)
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), lease.ErrLeaseLost) {
			return fmt.Errorf("fn's context ended with %w", context.Cause(ctx))
		}
		return nil
	})
	if !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("Do after the loss: %v, want ErrLeaseLost", err)
	}
}

// doMultiHoldsEveryKey: DoMulti's fn runs holding every key (another Locker
// is refused each), and the keys are free again once DoMulti returns.
func (s suite) doMultiHoldsEveryKey(t *testing.T) {
	l, other := s.locker(t, time.Minute), s.locker(t, time.Minute)
	k := []string{t.Name() + ":a", t.Name() + ":b"}
	err := l.DoMulti(ctxT(t, time.Minute), []string{k[1], k[0]}, func(ctx context.Context, le lease.Lease) error {
		if !slices.Equal(le.Keys(), k) {
			return fmt.Errorf("keys %q, want %q", le.Keys(), k)
		}
		for _, key := range k {
			if _, err := other.TryLock(ctx, key); !errors.Is(err, lease.ErrNotAcquired) {
				return fmt.Errorf("TryLock of %s inside DoMulti: %v, want ErrNotAcquired", key, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got := must(t)(other.TryLockMulti(ctxT(t, time.Minute), k...))
	_ = got.Unlock(ctxT(t, time.Minute))
}

func (s suite) multiAllOrNothing(t *testing.T) {
	a, b := s.locker(t, time.Minute), s.locker(t, time.Minute)
	k := []string{t.Name() + ":1", t.Name() + ":2", t.Name() + ":3"}
	held := must(t)(a.TryLock(ctxT(t, time.Minute), k[1]))
	if _, err := b.TryLockMulti(ctxT(t, time.Minute), k...); !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("TryLockMulti with one key held: %v, want ErrNotAcquired", err)
	}
	// The refused lease left the other keys free.
	for _, key := range []string{k[0], k[2]} {
		got := must(t)(s.locker(t, time.Minute).TryLock(ctxT(t, time.Minute), key))
		_ = got.Unlock(ctxT(t, time.Minute))
	}
	_ = held.Unlock(ctxT(t, time.Minute))
	le := must(t)(b.TryLockMulti(ctxT(t, time.Minute), k[2], k[0], k[1]))
	if !slices.Equal(le.Keys(), k) {
		t.Fatalf("Keys %q, want %q", le.Keys(), k)
	}
	_ = le.Unlock(ctxT(t, time.Minute))
}

func (s suite) multiOpposite(t *testing.T) {
	keys := []string{t.Name() + ":x", t.Name() + ":y", t.Name() + ":z"}
	sets := [][]string{{keys[0], keys[1], keys[2]}, {keys[2], keys[1], keys[0]}, {keys[1], keys[0]}, {keys[2], keys[0]}}
	var inside [3]atomic.Int32
	var overlaps atomic.Int32
	var wg sync.WaitGroup
	for w := range 6 {
		l := s.locker(t, time.Minute)
		wg.Go(func() {
			for i := range 6 {
				set := sets[(w+i)%len(sets)]
				le, err := l.LockMulti(ctxT(t, 2*time.Minute), set...)
				if err != nil {
					t.Error(err)
					return
				}
				for _, k := range set {
					if inside[slices.Index(keys, k)].Add(1) > 1 {
						overlaps.Add(1)
					}
				}
				time.Sleep(time.Millisecond)
				for _, k := range set {
					inside[slices.Index(keys, k)].Add(-1)
				}
				_ = le.Unlock(ctxT(t, time.Minute))
			}
		})
	}
	wg.Wait()
	if overlaps.Load() > 0 {
		t.Fatalf("%d times two leases held one key at once", overlaps.Load())
	}
}

func (s suite) closedAndBadInput(t *testing.T) {
	l := s.b.New(t, s.b.TTL, time.Minute)
	for _, keys := range [][]string{{""}, nil} {
		if _, err := l.TryLockMulti(ctxT(t, time.Minute), keys...); err == nil {
			t.Fatalf("TryLockMulti(%q) succeeded", keys)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Lock(ctxT(t, time.Minute), t.Name()); !errors.Is(err, lease.ErrClosed) {
		t.Fatalf("Lock after Close: %v, want ErrClosed", err)
	}
}
