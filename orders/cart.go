package orders

import (
	"context"
	"errors"
	"strings"

	"github.com/quorumlock/quorumlock/orders/request"
	"github.com/quorumlock/quorumlock/orders/store"
)

// placeCart places a cart in one transaction, under one lease on the stock
// keys of all its products: all or nothing on the lock nodes, so carts
// that share products, named in any order, never deadlock. A cart is not
// combined with other requests; its lease excludes the batches of its
// products' queues, which take the same keys, and its transaction takes
// the same fences. Without a locker, Postgres arbitrates alone.
func (s *Service) placeCart(ctx context.Context, items []request.Line, req store.OrderRequest) placed {
	for _, l := range items {
		// An unknown product gets no lock and no fence: bad input writes
		// nothing.
		if a, bad := s.unknown(ctx, l.ProductID); bad {
			s.metrics.place(a.result)
			return placed{a: a.answer, v: retryable, log: placeLog{result: a.result}}
		}
	}
	if s.locker == nil {
		return s.admit(ctx, func(log placeLog) placed {
			return s.cartOutcome(ctx, items, req, s.transactCart(ctx, items, req, nil, &log), log)
		})
	}
	keys := make([]string, len(items))
	for i, l := range items {
		keys[i] = stockKey(l.ProductID)
	}
	log := placeLog{batch: 1}
	for {
		lease, fail := s.lockStock(ctx, keys, 1, &log)
		if fail != nil {
			s.metrics.place(log.result)
			return placed{a: *fail, v: retryable, log: log}
		}
		res := s.transactCart(ctx, items, req, lease, &log)
		s.release(ctx, lease, log.lock)
		if errors.Is(res.err, store.ErrStaleFence) && log.attempts < s.attempts && ctx.Err() == nil {
			s.metrics.place("stale_fence") // a newer holder wrote first: lock again
			continue
		}
		return s.cartOutcome(ctx, items, req, res, log)
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

// transactCart places the cart in one transaction, each line fenced by
// lease (nil: Postgres takes the fences itself), and notes the products it
// sold out.
func (s *Service) transactCart(ctx context.Context, items []request.Line, req store.OrderRequest, lease Lease, log *placeLog) txResult {
	c := store.Cart{Order: req, Snapshot: snapshot, Lines: make([]store.CartLine, len(items))}
	for i, l := range items {
		k := stockKey(l.ProductID)
		c.Lines[i] = store.CartLine{ProductID: l.ProductID, Quantity: int64(l.Quantity), FenceKey: k}
		if lease != nil {
			c.Lines[i].Fence = lease.FenceOf(k)
		}
	}
	log.attempts++
	res, err := s.store.PlaceCart(ctx, c)
	if err == nil && s.queues != nil {
		for i, left := range res.Left {
			if left == 0 {
				s.queues.soldOut(items[i].ProductID)
			}
		}
	}
	return txResult{Placed: res.Placed, err: err}
}

// cartOutcome turns the cart's transaction result into its placement.
func (s *Service) cartOutcome(ctx context.Context, items []request.Line, req store.OrderRequest, r txResult, log placeLog) placed {
	products := make([]string, len(items))
	for i, l := range items {
		products[i] = l.ProductID
	}
	// Products are never deleted, so an unknown one here is a race with
	// hand-made SQL: name the cart's products.
	return s.outcome(ctx, strings.Join(products, ","), req, r, log)
}
