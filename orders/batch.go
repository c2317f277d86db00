package orders

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/internal/failpoint"
	"github.com/quorumlock/quorumlock/orders/store"
)

// runBatch places the orders of one batch of product, led by the request
// whose context is ctx: answered from the sold-out report when soldOut,
// else in one transaction under one lease. The work runs to its own budget
// whatever happens to the leader's context, since it places the others'
// orders too. It returns one result per ticket.
func (s *Service) runBatch(ctx context.Context, product string, batch []*ticket, soldOut bool) []placed {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.budget())
	defer cancel()
	s.metrics.batch(len(batch))
	if product == cartQueue {
		return s.cartBatch(ctx, batch)
	}
	if soldOut {
		return s.sellNothing(ctx, product, batch)
	}
	return s.lockedBatch(ctx, product, batch)
}

// lockedBatch takes the stock lock and places batch in one transaction
// under it, taking a new lease when the fence was stale (a bounded number
// of times).
func (s *Service) lockedBatch(ctx context.Context, product string, batch []*ticket) []placed {
	reqs := make([]store.OrderRequest, len(batch))
	for i, t := range batch {
		reqs[i] = t.req
	}
	log := placeLog{batch: len(batch)}
	// An unknown product gets no lock and no fence: bad input writes
	// nothing. One read per product, not per order.
	if u, bad := s.unknown(ctx, product); bad {
		log.result = u.result
		return s.allFail(batch, log, u.answer)
	}
	for {
		lease, fail := s.lockStock(ctx, []string{stockKey(product)}, len(batch), &log)
		if fail != nil {
			return s.allFail(batch, log, *fail)
		}
		res := s.transact(ctx, product, reqs, lease, &log)
		s.release(ctx, lease, log.lock)
		if errors.Is(res[0].err, store.ErrStaleFence) && log.attempts < s.attempts && ctx.Err() == nil {
			// A newer holder wrote first: this lease was lost. Take a new
			// one and try again.
			s.metrics.place("stale_fence")
			continue
		}
		out := make([]placed, len(batch))
		for i, t := range batch {
			l := log
			l.queued = time.Since(t.joined)
			out[i] = s.outcome(t.ctx, product, t.req, res[i], l)
		}
		return out
	}
}

// checkProduct reads whether product exists, unless this instance saw it
// already.
func (s *Service) checkProduct(ctx context.Context, product string) error {
	if s.queues.isKnown(product) {
		return nil
	}
	if _, err := s.store.Stock(ctx, product); err != nil {
		return err
	}
	s.queues.learn(product)
	return nil
}

// allFail gives every ticket of batch the answer a that nothing was
// written, with log.
func (s *Service) allFail(batch []*ticket, log placeLog, a answer) []placed {
	out := make([]placed, len(batch))
	for i, t := range batch {
		l := log
		l.queued = time.Since(t.joined)
		s.metrics.place(l.result)
		out[i] = placed{a: a, v: retryable, log: l}
	}
	return out
}

// lockStock takes the stock lock of keys for n requests, noting it in log.
// It returns the lease; no lease and no answer when the lock is out of
// reach and Postgres arbitrates alone (FallbackDB); or the answer that
// nothing was written.
func (s *Service) lockStock(ctx context.Context, keys []string, n int, log *placeLog) (Lease, *answer) {
	key := strings.Join(keys, ",")
	if s.fallback == FallbackDB && time.Now().UnixNano() < s.lockDown.Load() {
		// The lock was out of reach moments ago: Postgres arbitrates
		// without waiting for it again until the next probe.
		s.metrics.fallback(string(FallbackDB), n)
		log.fallback = string(FallbackDB)
		return nil, nil
	}
	start := time.Now()
	lease, err := s.locker.Lock(ctx, keys...)
	log.lock = &lockLog{key: key, acquire: time.Since(start)}
	unavailable := func(result, detail string) (Lease, *answer) {
		log.result = result
		return nil, &answer{kind: kindUnavailable, detail: detail, wait: s.retry}
	}
	switch {
	case err == nil:
		log.lock.LeaseDetail = lease.Detail()
		s.failpoints.Hit(failpoint.AfterLock)
		return lease, nil
	case ctx.Err() != nil:
		return unavailable("cancelled", "request cancelled or out of time")
	case errors.Is(err, ErrLockBusy):
		// Contention, not an outage: going around the lock would only
		// make the holder's fence stale.
		return unavailable("lock_busy", "the product is busy; retry")
	case !errors.Is(err, ErrLockUnavailable):
		// The lock was won but its fence could not be read: the database.
		s.log.Error("stock lock: fence unavailable", "key", key, "err", err)
		return unavailable("error", "the order database is unavailable")
	case s.fallback == FallbackReject:
		s.metrics.fallback(string(FallbackReject), n)
		log.fallback = string(FallbackReject)
		s.log.Warn("stock lock unavailable; rejecting", "key", key, "err", err)
		return unavailable("lock_unavailable", "the stock lock is unavailable")
	}
	s.metrics.fallback(string(FallbackDB), n)
	log.fallback = string(FallbackDB)
	s.lockDown.Store(time.Now().Add(lockProbe).UnixNano())
	s.log.Warn("stock lock quorum unavailable; Postgres arbitrates", "key", key, "err", err, "probe_in", lockProbe)
	return nil, nil
}

// lockProbe is how long the queues go without the lock once it was out of
// reach (FallbackDB), before one batch tries it again: waiting out the
// lock's own retries for every batch would stall every product.
const lockProbe = 5 * time.Second

// release unlocks lease after the transaction, bounded and even when the
// leader's context has ended, and notes in ll how it went.
func (s *Service) release(ctx context.Context, lease Lease, ll *lockLog) {
	if lease == nil {
		return
	}
	ll.remaining = time.Until(lease.Detail().Until)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	err := lease.Unlock(ctx)
	switch {
	case err == nil:
		ll.unlock = "released"
	case errors.Is(err, ErrLockLost):
		ll.unlock = "lost"
	case errors.Is(err, ErrUnlockUnconfirmed):
		ll.unlock = "unconfirmed"
	default:
		ll.unlock = "error"
	}
	if err != nil {
		s.log.Warn("stock unlock not confirmed", "key", ll.key, "token", ll.TokenDigest, "unlock", ll.unlock, "err", err)
	}
}

// sellNothing answers a batch of a product that a transaction found
// without stock moments ago: the out-of-stock outcomes are saved in one
// write, without the lock, for every key that has no outcome yet; the
// others take the normal path, which replays theirs.
func (s *Service) sellNothing(ctx context.Context, product string, batch []*ticket) []placed {
	carts := make([]store.Cart, len(batch))
	for i, t := range batch {
		carts[i] = store.Cart{Order: t.req, Snapshot: snapshot,
			Lines: []store.CartLine{{ProductID: product, Quantity: t.req.Quantity, FenceKey: stockKey(product)}}}
	}
	res, err := s.store.SaveOutOfStock(ctx, carts)
	if err != nil {
		s.log.Warn("sold-out answers not saved; placing them", "product_id", product, "err", err)
		return s.lockedBatch(ctx, product, batch)
	}
	out := make([]placed, len(batch))
	var rest []*ticket
	var restAt []int
	for i, t := range batch {
		if res[i].Outcome.Kind == "" {
			rest, restAt = append(rest, t), append(restAt, i)
			continue
		}
		log := placeLog{batch: len(batch), queued: time.Since(t.joined), soldOut: true}
		out[i] = s.outcome(t.ctx, product, t.req, txResult{Placed: res[i]}, log)
	}
	if len(rest) > 0 {
		for j, p := range s.lockedBatch(ctx, product, rest) {
			out[restAt[j]] = p
		}
	}
	return out
}
