package placement

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/internal/failpoint"
	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/orders/internal/answer"
	"github.com/quorumlock/quorumlock/orders/store"
)

// txResult is one order's result of a transaction: its store result, or
// the error of the whole transaction.
type txResult struct {
	store.Placed
	err error
}

// cartOf is the store's cart of t's order, each line fenced by held (nil:
// Postgres takes the fences itself).
func (p *Placer) cartOf(t *ticket, held lease.Lease) store.Cart {
	c := store.Cart{Order: t.order.Req, Snapshot: p.Snapshot, Lines: make([]store.CartLine, len(t.order.Lines))}
	for j, l := range t.order.Lines {
		k := stockKey(l.ProductID)
		c.Lines[j] = store.CartLine{ProductID: l.ProductID, Quantity: int64(l.Quantity), FenceKey: k}
		if held != nil {
			c.Lines[j].Fence = held.FenceOf(k)
		}
	}
	return c
}

// transact places the orders of batch in one transaction, fenced by held
// (nil: Postgres takes the fences itself); retrying a stale fence is the
// caller's. It returns one result per order, and the products the
// transaction left without stock, and reports what it did in log.
func (p *Placer) transact(ctx context.Context, batch []*ticket, held lease.Lease, log *Log) ([]txResult, []string) {
	carts := make([]store.Cart, len(batch))
	for i, t := range batch {
		carts[i] = p.cartOf(t, held)
	}
	log.Attempts++
	res, err := p.st.PlaceCarts(ctx, carts)
	out := make([]txResult, len(batch))
	var soldOut []string
	for i := range out {
		if err != nil {
			out[i].err = err
			continue
		}
		out[i].Placed = res[i].Placed
		for j, left := range res[i].Left {
			if left == 0 {
				soldOut = append(soldOut, batch[i].order.Lines[j].ProductID)
			}
		}
	}
	return out, soldOut
}

// productsOf names t's products, joined by commas.
func productsOf(t *ticket) string {
	products := make([]string, len(t.order.Lines))
	for i, l := range t.order.Lines {
		products[i] = l.ProductID
	}
	return strings.Join(products, ",")
}

// inDoubtWait bounds the lookups that answer the orders of one
// transaction whose commit is in doubt: all of them together, so that a
// batch of n orders against a Postgres that does not answer (paused, or
// cut off) ends after one wait, not n.
const inDoubtWait = 3 * time.Second

// inDoubt is the context of the lookups of one transaction's orders
// whose commit is in doubt, made on first use (most transactions have
// none, and the order path makes no timer for them).
type inDoubt struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// context returns the lookups' context, starting its deadline on first
// use.
func (d *inDoubt) context() context.Context {
	if d.ctx == nil {
		d.ctx, d.cancel = context.WithTimeout(context.Background(), inDoubtWait)
	}
	return d.ctx
}

// done releases the context, if one was made.
func (d *inDoubt) done() {
	if d.cancel != nil {
		d.cancel()
	}
}

// outcome turns one order's transaction result into its placement;
// lookup is the context of the lookup that answers an order whose commit
// is in doubt (see inDoubt).
func (p *Placer) outcome(lookup *inDoubt, t *ticket, r txResult, log Log) Result {
	res := Result{Log: log}
	err := r.err
	if err == nil {
		err = r.Err
	}
	a := &res.Answer
	switch {
	case err == nil || errors.Is(err, store.ErrOutOfStock):
		*a, res.Verdict = answer.Answer{Kind: answer.Outcome, Out: r.Outcome}, answer.Final
		res.Log.Result = "created"
		switch {
		case r.Outcome.Replayed:
			res.Log.Result = "replayed"
		case err != nil:
			res.Log.Result = "out_of_stock"
		default:
			p.Failpoints.Hit(failpoint.AfterCommit)
		}
	case errors.Is(err, store.ErrFingerprintMismatch):
		*a, res.Log.Result = answer.Answer{Kind: answer.KeyReused}, "fingerprint_mismatch"
	case errors.Is(err, store.ErrUnknownProduct):
		// Products are never deleted, so an unknown one here is a race
		// with hand-made SQL: name the order's products.
		*a, res.Log.Result = answer.Answer{Kind: answer.UnknownProduct, Product: productsOf(t)}, "unknown_product"
	case errors.Is(err, store.ErrStaleFence):
		*a, res.Log.Result = answer.Answer{Kind: answer.Unavailable, Detail: "the stock changed hands during the request; retry", Wait: p.Retry}, "stale_fence"
	case errors.Is(err, store.ErrInvalid):
		// The request was validated already: a wiring fault, not the
		// client's.
		p.Log.Error("place order refused its input", "err", err)
		*a, res.Log.Result = answer.Answer{Kind: answer.Internal, Detail: "the order could not be placed"}, "invalid"
	default:
		// The transaction failed in a way that may or may not have
		// committed. Postgres can tell.
		p.Log.Error("place order failed", "err", err)
		*a, res.Verdict = p.ambiguous(lookup.context(), t.order.Req)
		res.Log.Result = "error"
	}
	return res
}

// ambiguous answers after a transaction whose commit is in doubt, asking
// Postgres within ctx.
func (p *Placer) ambiguous(ctx context.Context, req store.OrderRequest) (answer.Answer, answer.Verdict) {
	out, err := p.st.Lookup(ctx, req.UserID, req.IdempotencyKey)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return answer.Answer{Kind: answer.Unavailable, Detail: "the order could not be placed; retry with the same Idempotency-Key", Wait: p.Retry}, answer.Retryable
	case err == nil && out.Fingerprint == req.Fingerprint:
		return answer.Answer{Kind: answer.Outcome, Out: out}, answer.Final
	case err == nil:
		return answer.Answer{Kind: answer.KeyReused}, answer.Retryable
	}
	// The kept claim sends the next attempt to Postgres after its lease.
	return answer.Answer{Kind: answer.OutcomeUnknown, Wait: p.OutcomeWait}, answer.Unknown
}

// unplaced is the 503 of a request that wrote nothing.
func (p *Placer) unplaced(result, detail string) Result {
	return Result{Answer: answer.Answer{Kind: answer.Unavailable, Detail: detail, Wait: p.Retry},
		Verdict: answer.Retryable, Log: Log{Result: result}}
}
