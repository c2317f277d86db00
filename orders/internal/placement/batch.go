package placement

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/quorumlock/quorumlock/orders/internal/answer"
	"github.com/quorumlock/quorumlock/orders/store"
)

// runBatch places the orders of batch b, led by the request whose
// context is ctx: those that name only a product found sold out moments
// ago are answered from that report, without the lock; the others are
// placed in one transaction, under one lease on every stock key of theirs
// when the batch is contended or the rule says always, else with the
// fences Postgres takes itself. The work runs to its own budget whatever
// happens to the leader's context, since it places the others' orders
// too. It returns one result per ticket, and the products the batch found
// without stock. It is the function the combiner runs.
func (p *Placer) runBatch(ctx context.Context, b *batch) ([]Result, []string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.Budget)
	defer cancel()
	p.Metrics.Batch(len(b.tickets))
	lock := b.contended || p.Rule == LockAlways
	var sold, rest []*ticket
	var restAt []int
	for i, t := range b.tickets {
		if b.soldOut[i] {
			sold = append(sold, t)
			continue
		}
		rest, restAt = append(rest, t), append(restAt, i)
	}
	if len(sold) == 0 {
		return p.placeBatch(ctx, rest, lock)
	}
	out := make([]Result, len(b.tickets))
	done, soldOut := p.sellNothing(ctx, sold, lock)
	for i, j := 0, 0; i < len(b.tickets); i++ {
		if b.soldOut[i] {
			out[i], j = done[j], j+1
		}
	}
	if len(rest) == 0 {
		return out, soldOut
	}
	placed, more := p.placeBatch(ctx, rest, lock)
	for j, r := range placed {
		out[restAt[j]] = r
	}
	return out, append(soldOut, more...)
}

// placeBatch places batch in one transaction: under the stock lock when
// lock, else with the fences Postgres takes itself (it arbitrates alone,
// as with no locker).
func (p *Placer) placeBatch(ctx context.Context, batch []*ticket, lock bool) ([]Result, []string) {
	if lock {
		return p.lockedBatch(ctx, batch)
	}
	log := Log{Batch: len(batch)}
	res, soldOut := p.transact(ctx, batch, nil, &log)
	return p.outcomes(batch, res, log), soldOut
}

// outcomes turns the results of a batch's transaction into its placements.
// The lookups of orders whose commit is in doubt share one deadline (see
// inDoubt).
func (p *Placer) outcomes(batch []*ticket, res []txResult, log Log) []Result {
	var lookup inDoubt
	defer lookup.done()
	out := make([]Result, len(batch))
	for i, t := range batch {
		l := log
		l.Queued = time.Since(t.joined)
		out[i] = p.outcome(&lookup, t, res[i], l)
	}
	return out
}

// lockedBatch takes the stock lock of every product of batch, all or
// nothing, and places batch in one transaction under it, taking a new
// lease when the fence was stale (a bounded number of times). The lease is
// all or nothing on the lock nodes, so batches that share products, named
// in any order, never deadlock.
func (p *Placer) lockedBatch(ctx context.Context, batch []*ticket) ([]Result, []string) {
	var keys []string
	for _, t := range batch {
		for _, l := range t.order.Lines {
			keys = append(keys, stockKey(l.ProductID))
		}
	}
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	log := Log{Batch: len(batch)}
	for {
		held, fail := p.lockStock(ctx, keys, &log)
		if fail != nil {
			return p.allFail(batch, log, *fail), nil
		}
		res, soldOut := p.transact(ctx, batch, held, &log)
		p.release(ctx, held, log.Lock)
		if errors.Is(res[0].err, store.ErrStaleFence) && log.Attempts < p.Attempts && ctx.Err() == nil {
			// A newer holder wrote first: this lease was lost. Take a new
			// one and try again.
			p.Metrics.Place("stale_fence")
			continue
		}
		return p.outcomes(batch, res, log), soldOut
	}
}

// sellNothing answers a batch of a product that a transaction found
// without stock moments ago: the out-of-stock outcomes are saved in one
// write, without the lock, for every key that has no outcome yet; the
// others take the normal path, which replays theirs.
func (p *Placer) sellNothing(ctx context.Context, batch []*ticket, lock bool) ([]Result, []string) {
	carts := make([]store.Cart, len(batch))
	for i, t := range batch {
		carts[i] = p.cartOf(t, nil)
	}
	res, err := p.st.SaveOutOfStock(ctx, carts)
	if err != nil {
		p.Log.Warn("sold-out answers not saved; placing them", "product_id", productsOf(batch[0]), "err", err)
		return p.placeBatch(ctx, batch, lock)
	}
	var lookup inDoubt
	defer lookup.done()
	out := make([]Result, len(batch))
	var rest []*ticket
	var restAt []int
	for i, t := range batch {
		if res[i].Outcome.Kind == "" {
			rest, restAt = append(rest, t), append(restAt, i)
			continue
		}
		log := Log{Batch: len(batch), Queued: time.Since(t.joined), SoldOut: true}
		out[i] = p.outcome(&lookup, t, txResult{Placed: res[i]}, log)
	}
	if len(rest) == 0 {
		return out, nil
	}
	placed, soldOut := p.placeBatch(ctx, rest, lock)
	for j, r := range placed {
		out[restAt[j]] = r
	}
	return out, soldOut
}

// allFail gives every ticket of batch the answer a that nothing was
// written, with log.
func (p *Placer) allFail(batch []*ticket, log Log, a answer.Answer) []Result {
	out := make([]Result, len(batch))
	for i, t := range batch {
		l := log
		l.Queued = time.Since(t.joined)
		out[i] = Result{Answer: a, Verdict: answer.Retryable, Log: l}
	}
	return out
}
