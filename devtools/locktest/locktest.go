// Package locktest is the lock's conformance suite: one set of tests that
// every implementation of lease.Locker (quorum's Redlock, etcdlock) must pass,
// against real servers. A backend's test calls Run with a Backend that
// makes Lockers on its servers and can make the servers forget a lease.
package locktest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/lease"
)

// Backend is one implementation under test.
type Backend struct {
	// New returns a Locker of its own on the backend's servers (as another
	// process would have), with the TTL and the wait bound given; the
	// test closes it.
	New func(t *testing.T, ttl, maxWait time.Duration) lease.Locker
	// Drop makes the servers forget lease, as a restart or an expiry
	// would: Redis keys deleted on a majority, an etcd lease revoked.
	Drop func(t *testing.T, le lease.Lease)
	// TTL is a lease length the backend accepts and the machine can keep
	// alive under load.
	TTL time.Duration
}

// Run runs the conformance suite against b.
func Run(t *testing.T, b Backend) {
	s := suite{b: b}
	t.Run("MutualExclusion", s.mutualExclusion)
	t.Run("TryLockWhileHeld", s.tryLockWhileHeld)
	t.Run("UnlockEndsTheLeaseOnce", s.unlockEndsTheLeaseOnce)
	t.Run("FencesIncreasePerKey", s.fencesIncrease)
	t.Run("LockGivesUpAtMaxWait", s.lockGivesUp)
	t.Run("LockReturnsTheContextError", s.contextError)
	t.Run("ExtendKeepsTheLease", s.extendKeeps)
	t.Run("AForgottenLeaseIsLost", s.forgottenIsLost)
	t.Run("DoRunsAndReleases", s.doRunsAndReleases)
	t.Run("DoCancelsFnWhenTheLeaseIsLost", s.doCancelsOnLoss)
	t.Run("DoMultiHoldsEveryKey", s.doMultiHoldsEveryKey)
	t.Run("MultiKeyIsAllOrNothing", s.multiAllOrNothing)
	t.Run("MultiKeyOppositeOrdersNeitherDeadlockNorOverlap", s.multiOpposite)
	t.Run("ClosedAndBadInput", s.closedAndBadInput)
}

type suite struct{ b Backend }

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func (s suite) locker(t *testing.T, maxWait time.Duration) lease.Locker {
	l := s.b.New(t, s.b.TTL, maxWait)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// must fails the test on an acquisition error: must(t)(l.Lock(ctx, k)).
func must(t *testing.T) func(lease.Lease, error) lease.Lease {
	return func(le lease.Lease, err error) lease.Lease {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return le
	}
}

func (s suite) mutualExclusion(t *testing.T) {
	var inside, overlaps, done atomic.Int32
	var wg sync.WaitGroup
	for range 3 {
		l := s.locker(t, time.Minute)
		for range 3 {
			wg.Go(func() {
				for range 8 {
					le, err := l.Lock(ctxT(t, 2*time.Minute), t.Name())
					if err != nil {
						t.Error(err)
						return
					}
					if inside.Add(1) > 1 {
						overlaps.Add(1)
					}
					time.Sleep(time.Millisecond)
					inside.Add(-1)
					if err := le.Unlock(ctxT(t, time.Minute)); err != nil {
						t.Error(err)
					}
					done.Add(1)
				}
			})
		}
	}
	wg.Wait()
	if overlaps.Load() > 0 || done.Load() != 72 {
		t.Fatalf("%d overlaps in %d critical sections, want 0 in 72", overlaps.Load(), done.Load())
	}
}

func (s suite) tryLockWhileHeld(t *testing.T) {
	a, b := s.locker(t, time.Minute), s.locker(t, time.Minute)
	held := must(t)(a.TryLock(ctxT(t, time.Minute), t.Name()))
	if _, err := b.TryLock(ctxT(t, time.Minute), t.Name()); !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("TryLock of a held key: %v, want ErrNotAcquired", err)
	}
	if err := held.Unlock(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	got := must(t)(b.TryLock(ctxT(t, time.Minute), t.Name()))
	_ = got.Unlock(ctxT(t, time.Minute))
}
