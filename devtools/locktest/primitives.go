package locktest

import (
	"context"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/lease"
)

// RunPrimitives runs the conformance cases of the primitives beyond the
// mutex (lease.Primitives: semaphores, read-write locks, elections)
// against b. Every Locker b.New returns must implement lease.Primitives,
// and have fences for elections (their terms are fences).
func RunPrimitives(t *testing.T, b Backend) {
	s := suite{b: b}
	s.prims(t, time.Minute)
	t.Run("SemaphoreNeverOverAdmits", s.semNeverOverAdmits)
	t.Run("SemaphoreTryAcquireWhenFull", s.semTryAcquireWhenFull)
	t.Run("SemaphorePermitsMismatch", s.semPermitsMismatch)
	t.Run("SemaphoreWaiterWokenOnRelease", s.semWaiterWoken)
	t.Run("SemaphorePermitFencesIncrease", s.semPermitFencesIncrease)
	t.Run("RWReadersShare", s.rwReadersShare)
	t.Run("RWWriterExcludes", s.rwWriterExcludes)
	t.Run("RWWriterPreference", s.rwWriterPreference)
	t.Run("ElectionOneLeader", s.electionOneLeader)
	t.Run("ElectionLeaderAndObserve", s.electionLeaderAndObserve)
	t.Run("ElectionNoLeader", s.electionNoLeader)
}

// prims returns a new Locker's primitives, failing t when the Locker has
// none.
func (s suite) prims(t *testing.T, maxWait time.Duration) lease.Primitives {
	t.Helper()
	l := s.locker(t, maxWait)
	p, ok := l.(lease.Primitives)
	if !ok {
		t.Fatalf("%T does not implement lease.Primitives", l)
	}
	return p
}

// semaphore returns a handle on the semaphore name of a new Locker.
func (s suite) semaphore(t *testing.T, maxWait time.Duration, name string, permits int) lease.Semaphore {
	t.Helper()
	sem, err := s.prims(t, maxWait).Semaphore(name, permits)
	if err != nil {
		t.Fatalf("Semaphore(%q, %d): %v", name, permits, err)
	}
	if sem.Name() != name || sem.Permits() != permits {
		t.Fatalf("Semaphore(%q, %d) is named %q with %d permits", name, permits, sem.Name(), sem.Permits())
	}
	return sem
}

// rwlock returns a handle on the read-write lock name of a new Locker.
func (s suite) rwlock(t *testing.T, maxWait time.Duration, name string) lease.RWLock {
	t.Helper()
	rw, err := s.prims(t, maxWait).RWLock(name)
	if err != nil {
		t.Fatalf("RWLock(%q): %v", name, err)
	}
	if rw.Name() != name {
		t.Fatalf("RWLock(%q) is named %q", name, rw.Name())
	}
	return rw
}

// election returns a candidate in the election name, on a new Locker.
func (s suite) election(t *testing.T, name string) lease.Election {
	t.Helper()
	e, err := s.prims(t, time.Minute).Election(name)
	if err != nil {
		t.Fatalf("Election(%q): %v (an election's terms are fences: the backend's Lockers need them)", name, err)
	}
	if e.Name() != name {
		t.Fatalf("Election(%q) is named %q", name, e.Name())
	}
	return e
}

// acquired is what an acquisition run in a goroutine returned.
type acquired struct {
	who int
	le  lease.Lease
	err error
}

// next waits up to d for an acquisition, failing t if none comes or it
// failed.
func next(t *testing.T, ch <-chan acquired, d time.Duration, what string) acquired {
	t.Helper()
	select {
	case a := <-ch:
		if a.err != nil {
			t.Fatalf("%s (%d): %v", what, a.who, a.err)
		}
		return a
	case <-time.After(d):
		t.Fatalf("%s: nothing after %v", what, d)
	}
	return acquired{}
}

// none fails t if an acquisition arrives within d: it checks that waiters
// keep waiting while they must.
func none(t *testing.T, ch <-chan acquired, d time.Duration, what string) {
	t.Helper()
	select {
	case a := <-ch:
		t.Fatalf("%s: %d returned (lease %v, err %v)", what, a.who, a.le != nil, a.err)
	case <-time.After(d):
	}
}

// lostWithin fails t if le's Lost channel stays open for d.
func lostWithin(t *testing.T, le lease.Lease, d time.Duration, what string) {
	t.Helper()
	select {
	case <-le.Lost():
	case <-time.After(d):
		t.Fatalf("%s: Lost still open after %v", what, d)
	}
}

// unlock releases le at the end of the test.
func unlock(t *testing.T, le lease.Lease) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = le.Unlock(ctx)
	})
}
