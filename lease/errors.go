package lease

import "errors"

// Sentinel errors shared by every locker. Test for them with errors.Is: a
// backend wraps them with its own details (quorum.QuorumError lists nodes).
var (
	// ErrNotAcquired means another owner holds the key: the ordinary
	// outcome of contention.
	ErrNotAcquired = errors.New("lease: lock is held by another owner")

	// ErrQuorumUnavailable means the backend could not grant the lock in
	// time: no majority of its servers answered, or none left validity.
	ErrQuorumUnavailable = errors.New("lease: backend unavailable for a majority decision")

	// ErrLeaseLost means the lease is, or may be, no longer held: its validity
	// ran out, the backend no longer has it, or Do's safety margin was reached.
	ErrLeaseLost = errors.New("lease: lease lost")

	// ErrUnlockUnconfirmed means the release was not confirmed in time;
	// calling Unlock again retries.
	ErrUnlockUnconfirmed = errors.New("lease: release not confirmed")

	// ErrReleased is the Err of a lease that was released by Unlock.
	ErrReleased = errors.New("lease: lease released")

	// ErrExtendUnconfirmed means an extension was neither confirmed nor found
	// the lease gone: the new validity may or may not apply.
	ErrExtendUnconfirmed = errors.New("lease: extension not confirmed")

	// ErrClosed means the Locker was closed.
	ErrClosed = errors.New("lease: locker closed")
)
