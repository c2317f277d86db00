package orders

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/orders/request"
	"github.com/quorumlock/quorumlock/orders/store"
)

// placeCart places a cart: with the lock, in this instance's queue of
// carts, whose leader places a batch of them (up to the batch limit, and
// maxCartKeys products) in one transaction under one lease on the stock
// keys of all their products. The lease is all or nothing on the lock
// nodes, so batches that share products, named in any order, never
// deadlock; it excludes the batches of those products' own queues, which
// take the same keys, and the transaction takes the same fences. Without
// a locker, Postgres arbitrates the cart alone.
func (s *Service) placeCart(ctx context.Context, items []request.Line, req store.OrderRequest) placed {
	for _, l := range items {
		// An unknown product gets no lock and no fence: bad input writes
		// nothing.
		if u, bad := s.unknown(ctx, l.ProductID); bad {
			s.metrics.place(u.result)
			return placed{a: u.answer, v: retryable, log: placeLog{result: u.result}}
		}
	}
	if s.queues != nil {
		return s.queues.join(ctx, cartQueue, req, items)
	}
	return s.admit(ctx, func(log placeLog) placed {
		t := &ticket{ctx: ctx, req: req, items: items, joined: time.Now()}
		res := s.transactCarts(ctx, []*ticket{t}, nil, &log)
		return s.cartOutcome(ctx, t, res[0], log)
	})
}

// cartBatch places a batch of carts under one lease on every key of their
// products, taking a new lease when the fence was stale (a bounded number
// of times).
func (s *Service) cartBatch(ctx context.Context, batch []*ticket) []placed {
	var keys []string
	for _, t := range batch {
		for _, l := range t.items {
			keys = append(keys, stockKey(l.ProductID))
		}
	}
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	log := placeLog{batch: len(batch)}
	for {
		lease, fail := s.lockStock(ctx, keys, len(batch), &log)
		if fail != nil {
			return s.allFail(batch, log, *fail)
		}
		res := s.transactCarts(ctx, batch, lease, &log)
		s.release(ctx, lease, log.lock)
		if errors.Is(res[0].err, store.ErrStaleFence) && log.attempts < s.attempts && ctx.Err() == nil {
			s.metrics.place("stale_fence") // a newer holder wrote first: lock again
			continue
		}
		out := make([]placed, len(batch))
		for i, t := range batch {
			l := log
			l.queued = time.Since(t.joined)
			out[i] = s.cartOutcome(t.ctx, t, res[i], l)
		}
		return out
	}
}

// unknownAnswer is the answer to a product that does not exist, or that
// could not be looked up.
type unknownAnswer struct {
	answer
	result string
}

// unknown reports whether product cannot be sold: it does not exist, or
// the database could not tell.
func (s *Service) unknown(ctx context.Context, product string) (unknownAnswer, bool) {
	var err error
	if s.queues != nil {
		err = s.checkProduct(ctx, product)
	} else {
		_, err = s.store.Stock(ctx, product)
	}
	switch {
	case err == nil:
		return unknownAnswer{}, false
	case errors.Is(err, store.ErrNotFound):
		return unknownAnswer{answer{kind: kindUnknownProduct, product: product}, "unknown_product"}, true
	}
	s.log.Error("read stock", "err", err)
	return unknownAnswer{answer{kind: kindUnavailable, detail: "the order database is unavailable", wait: s.retry}, "error"}, true
}

// transactCarts places the carts of batch in one transaction, each line
// fenced by lease (nil: Postgres takes the fences itself), and notes the
// products it sold out. It returns one result per cart.
func (s *Service) transactCarts(ctx context.Context, batch []*ticket, lease Lease, log *placeLog) []txResult {
	carts := make([]store.Cart, len(batch))
	for i, t := range batch {
		c := store.Cart{Order: t.req, Snapshot: snapshot, Lines: make([]store.CartLine, len(t.items))}
		for j, l := range t.items {
			k := stockKey(l.ProductID)
			c.Lines[j] = store.CartLine{ProductID: l.ProductID, Quantity: int64(l.Quantity), FenceKey: k}
			if lease != nil {
				c.Lines[j].Fence = lease.FenceOf(k)
			}
		}
		carts[i] = c
	}
	log.attempts++
	res, err := s.store.PlaceCarts(ctx, carts)
	out := make([]txResult, len(batch))
	for i := range out {
		if err != nil {
			out[i].err = err
			continue
		}
		out[i].Placed = res[i].Placed
		for j, left := range res[i].Left {
			if left == 0 && s.queues != nil {
				s.queues.soldOut(batch[i].items[j].ProductID)
			}
		}
	}
	return out
}

// cartOutcome turns a cart's transaction result into its placement.
func (s *Service) cartOutcome(ctx context.Context, t *ticket, r txResult, log placeLog) placed {
	products := make([]string, len(t.items))
	for i, l := range t.items {
		products[i] = l.ProductID
	}
	// Products are never deleted, so an unknown one here is a race with
	// hand-made SQL: name the cart's products.
	return s.outcome(ctx, strings.Join(products, ","), t.req, r, log)
}
