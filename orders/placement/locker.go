package placement

import (
	"context"
	"errors"
	"time"
)

// Locker takes the stock locks of products: one key, or several at once
// for a batch, all or nothing (a caller never holds some keys while it
// waits for others, so batches that share products cannot deadlock).
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
	// TokenDigest names the token, not the token.
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

// Fallback says what the placer does when the lock cannot be taken.
type Fallback string

// Fallback modes.
const (
	// FallbackDB lets Postgres arbitrate alone: the order transaction takes
	// its fence itself, and the conditional decrement still holds.
	FallbackDB Fallback = "db"
	// FallbackReject answers 503 with Retry-After.
	FallbackReject Fallback = "reject"
)

// Stock lock keys are "stock:" + product id; the fence counter of a
// product's stock has the same key.
func stockKey(productID string) string { return "stock:" + productID }
