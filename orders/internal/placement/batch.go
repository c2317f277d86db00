package placement

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/quorumlock/quorumlock/orders/internal/answer"
	"github.com/quorumlock/quorumlock/orders/store"
)

// runBatch places the orders of one batch of queue, led by the request
// whose context is ctx: answered from the sold-out report when soldOut,
// else in one transaction under one lease on every stock key of the
// batch. The work runs to its own budget whatever happens to the leader's
// context, since it places the others' orders too. It returns one result
// per ticket, and the products the batch found without stock. It is the
// function the combiner runs.
func (p *Placer) runBatch(ctx context.Context, _ string, batch []*ticket, soldOut bool) ([]Result, []string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.Budget)
	defer cancel()
	p.Metrics.Batch(len(batch))
	if soldOut {
		return p.sellNothing(ctx, batch)
	}
	return p.lockedBatch(ctx, batch)
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
		out := make([]Result, len(batch))
		for i, t := range batch {
			l := log
			l.Queued = time.Since(t.joined)
			out[i] = p.outcome(t, res[i], l)
		}
		return out, soldOut
	}
}

// sellNothing answers a batch of a product that a transaction found
// without stock moments ago: the out-of-stock outcomes are saved in one
// write, without the lock, for every key that has no outcome yet; the
// others take the normal path, which replays theirs.
func (p *Placer) sellNothing(ctx context.Context, batch []*ticket) ([]Result, []string) {
	carts := make([]store.Cart, len(batch))
	for i, t := range batch {
		carts[i] = p.cartOf(t, nil)
	}
	res, err := p.st.SaveOutOfStock(ctx, carts)
	if err != nil {
		p.Log.Warn("sold-out answers not saved; placing them", "product_id", productsOf(batch[0]), "err", err)
		return p.lockedBatch(ctx, batch)
	}
	out := make([]Result, len(batch))
	var rest []*ticket
	var restAt []int
	for i, t := range batch {
		if res[i].Outcome.Kind == "" {
			rest, restAt = append(rest, t), append(restAt, i)
			continue
		}
		log := Log{Batch: len(batch), Queued: time.Since(t.joined), SoldOut: true}
		out[i] = p.outcome(t, txResult{Placed: res[i]}, log)
	}
	if len(rest) == 0 {
		return out, nil
	}
	placed, soldOut := p.lockedBatch(ctx, rest)
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
