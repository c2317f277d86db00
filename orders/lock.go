package orders

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/orders/placement"
	"github.com/quorumlock/quorumlock/quorum"
)

// Locker takes the stock locks of products (see placement.Locker): one
// key, or several at once for a batch, all or nothing. The service knows a
// lock only through this interface and its sentinels: an adapter maps each
// backend's errors to them (QuorumLocker for the quorum package).
type Locker = placement.Locker

// Lease is a held stock lock on one key or more.
type Lease = placement.Lease

// LeaseDetail describes a lease for the logs.
type LeaseDetail = placement.LeaseDetail

// The lock's sentinels.
var (
	// ErrLockBusy: another request holds the stock lock, and it was not
	// freed within the wait. Contention, not an outage.
	ErrLockBusy = placement.ErrLockBusy
	// ErrLockUnavailable: the lock service cannot grant the lock (no
	// majority of its nodes answers).
	ErrLockUnavailable = placement.ErrLockUnavailable
	// ErrLockLost: Unlock found that the lease had expired or been taken
	// over before it was released.
	ErrLockLost = placement.ErrLockLost
	// ErrUnlockUnconfirmed: Unlock could not confirm the release.
	ErrUnlockUnconfirmed = placement.ErrUnlockUnconfirmed
)

// QuorumLocker adapts a quorum.Locker to Locker. Give it a fencing.Reserver
// as its Fencer (quorum.WithFencer), so that every lease carries a reserved
// fence that the order transaction takes.
func QuorumLocker(l *quorum.Locker) Locker { return quorumLocker{l} }

type quorumLocker struct{ l *quorum.Locker }

func (q quorumLocker) Lock(ctx context.Context, keys ...string) (Lease, error) {
	le, err := q.l.LockMulti(ctx, keys...)
	if err != nil {
		return nil, LockError(err)
	}
	return quorumLease{le}, nil
}

// LockError maps an acquisition error matching quorum's sentinels (both
// backends return them) to the orders sentinels, for lock adapters:
// lease.ErrNotAcquired to ErrLockBusy, lease.ErrQuorumUnavailable and
// lease.ErrClosed to ErrLockUnavailable; others pass as they are.
func LockError(err error) error {
	switch {
	case errors.Is(err, lease.ErrNotAcquired):
		return fmt.Errorf("%w: %w", ErrLockBusy, err)
	case errors.Is(err, lease.ErrQuorumUnavailable), errors.Is(err, lease.ErrClosed):
		return fmt.Errorf("%w: %w", ErrLockUnavailable, err)
	}
	return err
}

// UnlockError maps a release error to the orders sentinels, for lock
// adapters: lease.ErrLeaseLost to ErrLockLost, lease.ErrUnlockUnconfirmed
// to ErrUnlockUnconfirmed.
func UnlockError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, lease.ErrLeaseLost):
		return fmt.Errorf("%w: %w", ErrLockLost, err)
	case errors.Is(err, lease.ErrUnlockUnconfirmed):
		return fmt.Errorf("%w: %w", ErrUnlockUnconfirmed, err)
	}
	return err
}

type quorumLease struct{ l lease.Lease }

func (q quorumLease) FenceOf(key string) int64 { return q.l.FenceOf(key) }

func (q quorumLease) Unlock(ctx context.Context) error { return UnlockError(q.l.Unlock(ctx)) }

func (q quorumLease) Detail() LeaseDetail {
	return LeaseDetail{Key: strings.Join(q.l.Keys(), ","), TokenDigest: lease.TokenDigest(q.l.Token()), Fence: q.l.Fence(), Until: q.l.Until()}
}
