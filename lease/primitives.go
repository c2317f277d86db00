package lease

import (
	"context"
	"errors"
)

// Primitives builds the primitives beyond the mutex on a Locker's backend.
// Both lockers implement it (quorum.Locker, etcdlock.Locker); each primitive
// hands out Leases, so a permit, a read or write hold and a leadership have
// everything a lease has: Until, Extend, Lost, Unlock and fences.
type Primitives interface {
	// Semaphore returns the semaphore called name with permits permits
	// (at least 1). The count is fixed per name: an acquisition through a
	// handle naming another count for a name in use fails with
	// ErrPermitsMismatch.
	Semaphore(name string, permits int) (Semaphore, error)
	// RWLock returns the read-write lock called name.
	RWLock(name string) (RWLock, error)
	// Election returns a handle on the election called name: one candidate.
	Election(name string) (Election, error)
}

// Semaphore admits at most Permits holders at once. Each permit is a Lease
// of its own (its Key names the permit), with its own fence: a write fenced
// with a permit's fence is rejected once another holder took that permit.
type Semaphore interface {
	// Name returns the semaphore's name.
	Name() string
	// Permits returns the number of permits.
	Permits() int
	// Acquire takes a permit, waiting (up to the backend's maximum wait)
	// while all are held; waiters of one Locker are served oldest first.
	Acquire(ctx context.Context) (Lease, error)
	// TryAcquire makes one attempt: ErrNotAcquired when every permit is held.
	TryAcquire(ctx context.Context) (Lease, error)
	// Do takes a permit like Acquire, runs fn while it is kept alive, then
	// releases it, with the guarantees of Locker.Do.
	Do(ctx context.Context, fn func(ctx context.Context, l Lease) error) error
}

// RWLock admits many readers or one writer, never both. A waiting writer
// stops new readers, so that a stream of readers cannot starve it. A
// reader's lease carries no fence (readers do not exclude one another); the
// writer's does.
type RWLock interface {
	// Name returns the lock's name.
	Name() string
	// RLock takes a read lease, waiting while a writer holds or waits.
	RLock(ctx context.Context) (Lease, error)
	// TryRLock makes one attempt at a read lease.
	TryRLock(ctx context.Context) (Lease, error)
	// Lock takes the write lease, waiting while readers or a writer hold it.
	Lock(ctx context.Context) (Lease, error)
	// TryLock makes one attempt at the write lease.
	TryLock(ctx context.Context) (Lease, error)
	// RDo runs fn under a read lease kept alive, like Locker.Do.
	RDo(ctx context.Context, fn func(ctx context.Context, l Lease) error) error
	// Do runs fn under the write lease kept alive, like Locker.Do.
	Do(ctx context.Context, fn func(ctx context.Context, l Lease) error) error
}

// Leader is an elected leader as followers see it.
type Leader struct {
	// Value is what the leader campaigned with (an address, a name).
	Value string
	// Term is the leadership's fence: greater than every earlier term.
	Term int64
}

// Election elects one leader among the candidates of a name. The term is
// the leader's fence: every leader's term is greater than every earlier
// one's, so a resource that rejects writes below the last term it saw
// rejects a deposed leader's. A handle is one candidate: Campaign, then
// Resign, then it may campaign again.
type Election interface {
	// Name returns the election's name.
	Name() string
	// Campaign waits until this candidate leads, or ctx ends, and returns
	// the leadership as a Lease (Fence is the term; Lost closes when the
	// leadership ends, before another leader can be elected).
	Campaign(ctx context.Context, value string) (Lease, error)
	// Resign ends this candidate's leadership, if it leads.
	Resign(ctx context.Context) error
	// Leader returns the current leader: ErrNoLeader when there is none.
	Leader(ctx context.Context) (Leader, error)
	// Observe delivers the leaders, in increasing term order, until ctx
	// ends; then the channel is closed.
	Observe(ctx context.Context) <-chan Leader
}

// Sentinel errors of the primitives, tested with errors.Is.
var (
	// ErrPermitsMismatch means a semaphore of this name is in use with
	// another number of permits.
	ErrPermitsMismatch = errors.New("lease: semaphore is in use with another permit count")

	// ErrNoLeader means the election has no leader now.
	ErrNoLeader = errors.New("lease: no leader")

	// ErrNoFencer means the primitive needs a Fencer (an election's terms
	// come from it) and the Locker has none.
	ErrNoFencer = errors.New("lease: the locker has no fencer")

	// ErrNotLeader means Resign was called by a candidate that does not lead.
	ErrNotLeader = errors.New("lease: not the leader")
)
