package placement

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quorumlock/quorumlock/orders/internal/answer"
	"github.com/quorumlock/quorumlock/orders/store"
)

// DefaultHotFor is how long a product stays contended, by default, after
// two of its requests were on one instance at once.
const DefaultHotFor = 2 * time.Second

// New returns a Placer over st.
func New(st *store.Store, c Config) (*Placer, error) {
	switch {
	case st == nil || c.Snapshot == nil || c.Log == nil:
		return nil, fmt.Errorf("%w: a store, a snapshot renderer and a logger are required", ErrConfig)
	case c.Retry <= 0 || c.Attempts < 1 || c.Budget <= 0 || c.OutcomeWait <= 0:
		return nil, fmt.Errorf("%w: retry, attempts, budget and outcome wait must be positive", ErrConfig)
	case c.BatchLimit < 1 || c.BatchLimit > store.MaxBatch || c.QueueLimit < 1 || c.QueueWait <= 0 || c.SoldOutFor <= 0:
		return nil, fmt.Errorf("%w: batch and queue limits out of range", ErrConfig)
	case c.Rule != "" && c.Rule != LockContended && c.Rule != LockAlways:
		return nil, fmt.Errorf("%w: lock rule %q: want %q or %q", ErrConfig, c.Rule, LockContended, LockAlways)
	case c.Lanes < 0 || c.HotFor < 0:
		return nil, fmt.Errorf("%w: negative lanes or contention window", ErrConfig)
	}
	if c.Lanes == 0 {
		c.Lanes = max(2, st.MaxConns()/2)
	}
	if c.HotFor == 0 {
		c.HotFor = DefaultHotFor
	}
	p := &Placer{st: st, Config: c, known: newProductSet()}
	if c.Locker != nil {
		p.queues = newCombiner(combinerConfig{
			run: p.runBatch, unplaced: p.unplaced, waiting: c.Metrics.Waiting, waited: c.Metrics.Waited, lanes: c.Lanes,
			batchLimit: c.BatchLimit, queueLimit: c.QueueLimit, queueWait: c.QueueWait, soldOutFor: c.SoldOutFor, hotFor: c.HotFor,
		})
	} else {
		p.admitted = newAdmission(max(st.MaxConns(), 1), c.QueueLimit, c.QueueWait)
	}
	return p, nil
}

// Place places o: in its queue when the placer has a locker, alone
// otherwise. An unknown product gets no lock and no fence: bad input
// writes nothing.
func (p *Placer) Place(ctx context.Context, o Order) Result {
	for _, l := range o.Lines {
		if r, bad := p.unknown(ctx, l.ProductID); bad {
			return r
		}
	}
	if p.queues != nil {
		return p.queues.join(ctx, o)
	}
	return p.alone(ctx, o)
}

// alone runs o's own transaction, Postgres arbitrating alone, once
// admitted.
func (p *Placer) alone(ctx context.Context, o Order) Result {
	start := time.Now()
	leave, result, detail := p.admitted.enter(ctx)
	if leave == nil {
		return p.unplaced(result, detail)
	}
	defer leave()
	t := &ticket{ctx: ctx, order: o, joined: start}
	log := Log{Batch: 1, Queued: time.Since(start)}
	res, _ := p.transact(ctx, []*ticket{t}, nil, &log)
	var lookup inDoubt
	defer lookup.done()
	return p.outcome(&lookup, t, res[0], log)
}

// Restocked tells the placer that units of product came back to its stock
// (a cancelled or expired order): a sold-out report of this instance ends
// at once.
func (p *Placer) Restocked(product string) {
	if p.queues != nil {
		p.queues.restocked(product)
	}
}

// Queued returns how many requests wait in the queue of product ("" for
// the queue of carts of several products), for tests and diagnostics.
func (p *Placer) Queued(product string) int {
	if p.queues == nil {
		return 0
	}
	return p.queues.queued(product)
}

// unknown reports whether product cannot be sold: it does not exist, or
// the database could not tell. One read per product and instance.
func (p *Placer) unknown(ctx context.Context, product string) (Result, bool) {
	if p.known.has(product) {
		return Result{}, false
	}
	_, err := p.st.Stock(ctx, product)
	var r Result
	switch {
	case err == nil:
		p.known.add(product)
		return Result{}, false
	case errors.Is(err, store.ErrNotFound):
		r.Answer, r.Log.Result = answer.Answer{Kind: answer.UnknownProduct, Product: product}, "unknown_product"
	default:
		p.Log.Error("read stock", "err", err)
		r.Answer, r.Log.Result = answer.Answer{Kind: answer.Unavailable, Detail: "the order database is unavailable", Wait: p.Retry}, "error"
	}
	return r, true
}
