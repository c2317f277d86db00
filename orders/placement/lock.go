package placement

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/internal/failpoint"
	"github.com/quorumlock/quorumlock/orders/answer"
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

// lockProbe is how long the queues go without the lock once it was out of
// reach (FallbackDB), before one batch tries it again: waiting out the
// lock's own retries for every batch would stall every product.
const lockProbe = 5 * time.Second

// Stock lock keys are "stock:" + product id; the fence counter of a
// product's stock has the same key.
func stockKey(productID string) string { return "stock:" + productID }

// lockStock takes the stock lock of keys for n requests, noting it in log.
// It returns the lease; no lease and no answer when the lock is out of
// reach and Postgres arbitrates alone (FallbackDB); or the answer that
// nothing was written.
func (p *Placer) lockStock(ctx context.Context, keys []string, n int, log *Log) (Lease, *answer.Answer) {
	key := strings.Join(keys, ",")
	if p.Fallback == FallbackDB && time.Now().UnixNano() < p.lockDown.Load() {
		// The lock was out of reach moments ago: Postgres arbitrates
		// without waiting for it again until the next probe.
		p.Metrics.Fallback(string(FallbackDB), n)
		log.Fallback = string(FallbackDB)
		return nil, nil
	}
	start := time.Now()
	lease, err := p.Locker.Lock(ctx, keys...)
	log.Lock = &LockLog{Key: key, Acquire: time.Since(start)}
	unavailable := func(result, detail string) (Lease, *answer.Answer) {
		log.Result = result
		return nil, &answer.Answer{Kind: answer.Unavailable, Detail: detail, Wait: p.Retry}
	}
	switch {
	case err == nil:
		d := lease.Detail()
		log.Lock.TokenDigest, log.Lock.Fence = d.TokenDigest, d.Fence
		p.Failpoints.Hit(failpoint.AfterLock)
		return lease, nil
	case ctx.Err() != nil:
		return unavailable("cancelled", "request cancelled or out of time")
	case errors.Is(err, ErrLockBusy):
		// Contention, not an outage: going around the lock would only
		// make the holder's fence stale.
		return unavailable("lock_busy", "the product is busy; retry")
	case !errors.Is(err, ErrLockUnavailable):
		// The lock was won but its fence could not be read: the database.
		p.Log.Error("stock lock: fence unavailable", "key", key, "err", err)
		return unavailable("error", "the order database is unavailable")
	case p.Fallback == FallbackReject:
		p.Metrics.Fallback(string(FallbackReject), n)
		log.Fallback = string(FallbackReject)
		p.Log.Warn("stock lock unavailable; rejecting", "key", key, "err", err)
		return unavailable("lock_unavailable", "the stock lock is unavailable")
	}
	p.Metrics.Fallback(string(FallbackDB), n)
	log.Fallback = string(FallbackDB)
	p.lockDown.Store(time.Now().Add(lockProbe).UnixNano())
	p.Log.Warn("stock lock quorum unavailable; Postgres arbitrates", "key", key, "err", err, "probe_in", lockProbe)
	return nil, nil
}

// release unlocks lease after the transaction, bounded and even when the
// leader's context has ended, and notes in ll how it went.
func (p *Placer) release(ctx context.Context, lease Lease, ll *LockLog) {
	if lease == nil {
		return
	}
	ll.Remaining = time.Until(lease.Detail().Until)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	err := lease.Unlock(ctx)
	switch {
	case err == nil:
		ll.Unlock = "released"
	case errors.Is(err, ErrLockLost):
		ll.Unlock = "lost"
	case errors.Is(err, ErrUnlockUnconfirmed):
		ll.Unlock = "unconfirmed"
	default:
		ll.Unlock = "error"
	}
	if err != nil {
		p.Log.Warn("stock unlock not confirmed", "key", ll.Key, "token", ll.TokenDigest, "unlock", ll.Unlock, "err", err)
	}
}
