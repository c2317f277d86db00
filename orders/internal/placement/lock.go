package placement

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/internal/failpoint"
	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/orders/internal/answer"
)

// lockProbe is how long the queues go without the lock once it was out of
// reach (FallbackDB), before one batch tries it again: waiting out the
// lock's own retries for every batch would stall every product.
const lockProbe = 5 * time.Second

// lockStock takes the stock lock of keys, all or nothing, noting it in log
// (the create flow counts the requests that went without it).
// It returns the lease; no lease and no answer when the lock is out of
// reach and Postgres arbitrates alone (FallbackDB); or the answer that
// nothing was written.
func (p *Placer) lockStock(ctx context.Context, keys []string, log *Log) (lease.Lease, *answer.Answer) {
	key := strings.Join(keys, ",")
	if p.Fallback == FallbackDB && time.Now().UnixNano() < p.lockDown.Load() {
		// The lock was out of reach moments ago: Postgres arbitrates
		// without waiting for it again until the next probe.
		log.Fallback = string(FallbackDB)
		return nil, nil
	}
	start := time.Now()
	held, err := p.Locker.LockMulti(ctx, keys...)
	log.Lock = &LockLog{Key: key, Acquire: time.Since(start)}
	unavailable := func(result, detail string) (lease.Lease, *answer.Answer) {
		log.Result = result
		return nil, &answer.Answer{Kind: answer.Unavailable, Detail: detail, Wait: p.Retry}
	}
	switch {
	case err == nil:
		log.Lock.TokenDigest, log.Lock.Fence = lease.TokenDigest(held.Token()), held.Fence()
		p.Failpoints.Hit(failpoint.AfterLock)
		return held, nil
	case ctx.Err() != nil:
		return unavailable("cancelled", "request cancelled or out of time")
	case errors.Is(err, lease.ErrNotAcquired):
		// Contention, not an outage: going around the lock would only
		// make the holder's fence stale.
		return unavailable("lock_busy", "the product is busy; retry")
	case !errors.Is(err, lease.ErrQuorumUnavailable) && !errors.Is(err, lease.ErrClosed):
		// No majority decided against the lock: it was won but its fence
		// could not be read, the database.
		p.Log.Error("stock lock: fence unavailable", "key", key, "err", err)
		return unavailable("error", "the order database is unavailable")
	case p.Fallback == FallbackReject:
		log.Fallback = string(FallbackReject)
		p.Log.Warn("stock lock unavailable; rejecting", "key", key, "err", err)
		return unavailable("lock_unavailable", "the stock lock is unavailable")
	}
	log.Fallback = string(FallbackDB)
	p.lockDown.Store(time.Now().Add(lockProbe).UnixNano())
	p.Log.Warn("stock lock quorum unavailable; Postgres arbitrates", "key", key, "err", err, "probe_in", lockProbe)
	return nil, nil
}

// release unlocks lease after the transaction, bounded and even when the
// leader's context has ended, and notes in ll how it went.
func (p *Placer) release(ctx context.Context, held lease.Lease, ll *LockLog) {
	if held == nil {
		return
	}
	ll.Remaining = time.Until(held.Until())
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	err := held.Unlock(ctx)
	switch {
	case err == nil:
		ll.Unlock = "released"
	case errors.Is(err, lease.ErrLeaseLost):
		ll.Unlock = "lost"
	case errors.Is(err, lease.ErrUnlockUnconfirmed):
		ll.Unlock = "unconfirmed"
	default:
		ll.Unlock = "error"
	}
	if err != nil {
		p.Log.Warn("stock unlock not confirmed", "key", ll.Key, "token", ll.TokenDigest, "unlock", ll.Unlock, "err", err)
	}
}
