package orders

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/quorum"
)

// Locker takes the stock locks of products: one key, or several at once
// for a cart, all or nothing (a caller never holds some keys while it
// waits for others, so carts that share products cannot deadlock). The
// service knows a lock only through this interface and its sentinels: an
// adapter maps each backend's errors to them (QuorumLocker for the quorum
// package).
//
// Lock's error matches ErrLockBusy when another request holds the lock past
// the wait, ErrLockUnavailable when the lock service cannot decide (no
// quorum: Postgres may arbitrate alone), or wraps the context's error;
// anything else (say, a fence that could not be read) is an error of the
// database behind the fence.
type Locker interface {
	Lock(ctx context.Context, keys ...string) (Lease, error)
}

// Lease is a held stock lock on one key or more.
type Lease interface {
	// FenceOf is the lease's fence token for one of its keys (> 0):
	// reserved, to be taken by the order transaction (see
	// fencing.Reserver).
	FenceOf(key string) int64
	// Unlock releases the lock. Its error matches ErrLockLost when the
	// lock had expired or been taken over, or ErrUnlockUnconfirmed when the
	// release was not confirmed in time (the lock then expires by itself).
	Unlock(ctx context.Context) error
	// Detail is what the request log may show of the lease: never its
	// token.
	Detail() LeaseDetail
}

// LeaseDetail describes a lease for the logs.
type LeaseDetail struct {
	// Key is the key, or a multi-key lease's keys joined by commas.
	Key string
	// TokenDigest names the token (lease.TokenDigest), not the token.
	TokenDigest string
	// Fence is the first key's fence.
	Fence int64
	// Until is the end of the lease's validity (monotonic).
	Until time.Time
}

// The lock's sentinels.
var (
	// ErrLockBusy: another request holds the stock lock, and it was not
	// freed within the wait. Contention, not an outage.
	ErrLockBusy = errors.New("orders: the stock lock is held by another request")
	// ErrLockUnavailable: the lock service cannot grant the lock (no
	// majority of its nodes answers).
	ErrLockUnavailable = errors.New("orders: the stock lock is unavailable")
	// ErrLockLost: Unlock found that the lease had expired or been taken
	// over before it was released.
	ErrLockLost = errors.New("orders: the stock lock was lost before its release")
	// ErrUnlockUnconfirmed: Unlock could not confirm the release.
	ErrUnlockUnconfirmed = errors.New("orders: the release of the stock lock was not confirmed")
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

// LockError maps an acquisition error matching package lease's sentinels
// (both backends return them) to the orders sentinels, for lock adapters:
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

// Fallback says what the service does when the lock cannot be taken.
type Fallback string

// Fallback modes.
const (
	// FallbackDB lets Postgres arbitrate alone: the order transaction takes
	// its fence itself, and the conditional decrement still holds. The
	// default.
	FallbackDB Fallback = "db"
	// FallbackReject answers 503 with Retry-After.
	FallbackReject Fallback = "reject"
)

// ParseFallback reads a Fallback from configuration; "" is FallbackDB.
func ParseFallback(s string) (Fallback, error) {
	switch f := Fallback(s); f {
	case FallbackDB, FallbackReject:
		return f, nil
	case "":
		return FallbackDB, nil
	}
	return "", fmt.Errorf("%w: lock fallback %q: want db or reject", ErrConfig, s)
}

// Stock lock keys are "stock:" + product id; the fence counter of a
// product's stock has the same key.
func stockKey(productID string) string { return "stock:" + productID }
