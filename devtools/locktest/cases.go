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

	"github.com/quorumlock/quorumlock/quorum"
)

func (s suite) unlockEndsTheLeaseOnce(t *testing.T) {
	l := s.locker(t, time.Minute)
	lease := must(t)(l.Lock(ctxT(t, time.Minute), t.Name()))
	if err := lease.Err(); err != nil {
		t.Fatalf("Err of a held lease: %v", err)
	}
	if err := lease.Unlock(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease.Lost():
	default:
		t.Fatal("Lost is open after Unlock")
	}
	if !errors.Is(lease.Err(), quorum.ErrReleased) {
		t.Fatalf("Err after Unlock: %v, want ErrReleased", lease.Err())
	}
	if err := lease.Unlock(ctxT(t, time.Minute)); err != nil {
		t.Fatalf("a second Unlock: %v", err)
	}
}

// fencesIncrease: successive holders of a key, on several Lockers, get
// strictly increasing fences, for single and multi-key leases alike.
func (s suite) fencesIncrease(t *testing.T) {
	ls := []Locker{s.locker(t, time.Minute), s.locker(t, time.Minute)}
	k, other := t.Name()+":a", t.Name()+":b"
	var last, lastOther int64
	for i := range 8 {
		var lease Lease
		if i%3 == 2 {
			lease = must(t)(ls[i%2].LockMulti(ctxT(t, time.Minute), other, k))
			if f := lease.FenceOf(other); f <= lastOther {
				t.Fatalf("holder %d: fence %d of %s after %d", i, f, other, lastOther)
			}
			lastOther = lease.FenceOf(other)
		} else {
			lease = must(t)(ls[i%2].Lock(ctxT(t, time.Minute), k))
		}
		if f := lease.FenceOf(k); f <= last || (lease.Key() == k && lease.Fence() != f) {
			t.Fatalf("holder %d: fence %d (Fence %d) after %d", i, f, lease.Fence(), last)
		}
		last = lease.FenceOf(k)
		if err := lease.Unlock(ctxT(t, time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
}

func (s suite) lockGivesUp(t *testing.T) {
	a, b := s.locker(t, time.Minute), s.locker(t, time.Second)
	held := must(t)(a.Lock(ctxT(t, time.Minute), t.Name()))
	start := time.Now()
	_, err := b.Lock(ctxT(t, time.Minute), t.Name())
	if !errors.Is(err, quorum.ErrNotAcquired) {
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
	lease := must(t)(l.Lock(ctxT(t, time.Minute), t.Name()))
	defer func() { _ = lease.Unlock(ctxT(t, time.Minute)) }()
	before := lease.Until()
	time.Sleep(10 * time.Millisecond)
	if err := lease.Extend(ctxT(t, time.Minute), s.b.TTL); err != nil {
		t.Fatal(err)
	}
	if !lease.Until().After(before) || lease.Err() != nil {
		t.Fatalf("Until %v after Extend, was %v; Err %v", lease.Until(), before, lease.Err())
	}
}

func (s suite) forgottenIsLost(t *testing.T) {
	l := s.locker(t, time.Minute)
	lease := must(t)(l.LockMulti(ctxT(t, time.Minute), t.Name()+":a", t.Name()+":b"))
	s.b.Drop(t, lease)
	if err := lease.Extend(ctxT(t, time.Minute), s.b.TTL); !errors.Is(err, quorum.ErrLeaseLost) {
		t.Fatalf("Extend of a forgotten lease: %v, want ErrLeaseLost", err)
	}
	select {
	case <-lease.Lost():
	case <-time.After(time.Minute):
		t.Fatal("Lost still open after the loss")
	}
	if !errors.Is(lease.Err(), quorum.ErrLeaseLost) {
		t.Fatalf("Err %v, want ErrLeaseLost", lease.Err())
	}
	_ = lease.Unlock(ctxT(t, time.Minute))
	// The keys are free for the next owner.
	got := must(t)(s.locker(t, time.Minute).TryLockMulti(ctxT(t, time.Minute), t.Name()+":b", t.Name()+":a"))
	_ = got.Unlock(ctxT(t, time.Minute))
}

func (s suite) doRunsAndReleases(t *testing.T) {
	l := s.locker(t, time.Minute)
	ran := false
	err := l.Do(ctxT(t, time.Minute), t.Name(), func(ctx context.Context, lease Lease) error {
		ran = lease.Key() == t.Name() && lease.Err() == nil
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
	err := l.Do(ctxT(t, 2*time.Minute), t.Name(), func(ctx context.Context, lease Lease) error {
		s.b.Drop(t, lease)
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), quorum.ErrLeaseLost) {
			return fmt.Errorf("fn's context ended with %w", context.Cause(ctx))
		}
		return nil
	})
	if !errors.Is(err, quorum.ErrLeaseLost) {
		t.Fatalf("Do after the loss: %v, want ErrLeaseLost", err)
	}
}

func (s suite) multiAllOrNothing(t *testing.T) {
	a, b := s.locker(t, time.Minute), s.locker(t, time.Minute)
	k := []string{t.Name() + ":1", t.Name() + ":2", t.Name() + ":3"}
	held := must(t)(a.TryLock(ctxT(t, time.Minute), k[1]))
	if _, err := b.TryLockMulti(ctxT(t, time.Minute), k...); !errors.Is(err, quorum.ErrNotAcquired) {
		t.Fatalf("TryLockMulti with one key held: %v, want ErrNotAcquired", err)
	}
	// The refused lease left the other keys free.
	for _, key := range []string{k[0], k[2]} {
		got := must(t)(s.locker(t, time.Minute).TryLock(ctxT(t, time.Minute), key))
		_ = got.Unlock(ctxT(t, time.Minute))
	}
	_ = held.Unlock(ctxT(t, time.Minute))
	lease := must(t)(b.TryLockMulti(ctxT(t, time.Minute), k[2], k[0], k[1]))
	if !slices.Equal(lease.Keys(), k) {
		t.Fatalf("Keys %q, want %q", lease.Keys(), k)
	}
	_ = lease.Unlock(ctxT(t, time.Minute))
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
				lease, err := l.LockMulti(ctxT(t, 2*time.Minute), set...)
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
				_ = lease.Unlock(ctxT(t, time.Minute))
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
	if _, err := l.Lock(ctxT(t, time.Minute), t.Name()); !errors.Is(err, quorum.ErrClosed) {
		t.Fatalf("Lock after Close: %v, want ErrClosed", err)
	}
}
