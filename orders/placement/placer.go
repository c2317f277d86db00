// Package placement places the orders of the service: each request is a
// cart (a single-product order is a one-line cart); with a Locker the
// requests queue on this instance (one queue per product for one-line
// carts, one for the carts of several products) and the head of a queue
// places a batch of them in one transaction under one lease on the stock
// keys of their products; without one, each request runs its own
// transaction once admitted, and Postgres arbitrates alone.
//
// A Placer answers each request with an answer.Answer, what it means for
// the idempotency record, and what it did, for the request's log line.
package placement

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/internal/failpoint"
	"github.com/quorumlock/quorumlock/orders/metrics"
	"github.com/quorumlock/quorumlock/orders/request"
	"github.com/quorumlock/quorumlock/orders/store"
)

// ErrConfig is wrapped by the configuration errors of New.
var ErrConfig = errors.New("placement: invalid configuration")

// Config is what a Placer is built with; the order service fills it from
// its options. Zero limits are errors.
type Config struct {
	// Locker is the stock lock; nil: Postgres arbitrates alone.
	Locker Locker
	// Fallback is what happens when the lock cannot be taken.
	Fallback Fallback
	// Snapshot renders the answer saved with a new outcome.
	Snapshot func(store.Outcome) store.Snapshot
	// Retry is the Retry-After of 503 answers.
	Retry time.Duration
	// Attempts bounds the transactions of a batch (a stale fence retries).
	Attempts int
	// Budget bounds the placing of one batch.
	Budget time.Duration
	// OutcomeWait is the Retry-After of an outcome in doubt: the kept
	// claim's lease (Retry without claims).
	OutcomeWait time.Duration
	// BatchLimit, QueueLimit, QueueWait and SoldOutFor: see the service's
	// options.
	BatchLimit, QueueLimit int
	QueueWait, SoldOutFor  time.Duration
	Metrics                *metrics.Metrics
	Log                    *slog.Logger
	Failpoints             *failpoint.Set
}

// Placer places orders. It is safe for concurrent use.
type Placer struct {
	st *store.Store
	Config
	queues   *combiner   // with a locker: the queues
	admitted *admission  // without one: the placements under way
	known    *productSet // products seen in Postgres
	lockDown atomic.Int64
}

// Order is one request to place: who asks, under which key, and the id a
// new order gets, and its lines (one for a single-product order).
type Order struct {
	Req   store.OrderRequest
	Lines []request.Line
}

// New returns a Placer over st.
func New(st *store.Store, c Config) (*Placer, error) {
	switch {
	case st == nil || c.Snapshot == nil || c.Log == nil:
		return nil, fmt.Errorf("%w: a store, a snapshot renderer and a logger are required", ErrConfig)
	case c.Retry <= 0 || c.Attempts < 1 || c.Budget <= 0 || c.OutcomeWait <= 0:
		return nil, fmt.Errorf("%w: retry, attempts, budget and outcome wait must be positive", ErrConfig)
	case c.BatchLimit < 1 || c.BatchLimit > store.MaxBatch || c.QueueLimit < 1 || c.QueueWait <= 0 || c.SoldOutFor <= 0:
		return nil, fmt.Errorf("%w: batch and queue limits out of range", ErrConfig)
	}
	p := &Placer{st: st, Config: c, known: newProductSet()}
	if c.Locker != nil {
		p.queues = newCombiner(combinerConfig{
			run: p.runBatch, unplaced: p.unplaced, waiting: c.Metrics.Waiting,
			batchLimit: c.BatchLimit, queueLimit: c.QueueLimit, queueWait: c.QueueWait, soldOutFor: c.SoldOutFor,
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
		return p.queues.join(ctx, queueOf(o.Lines), o)
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
	res := p.transact(ctx, []*ticket{t}, nil, &log)
	return p.outcome(t, res[0], log)
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
	if product == "" {
		product = cartQueue
	}
	return p.queues.queued(product)
}
