package orders

import (
	"testing"

	"github.com/quorumlock/quorumlock/orders/request"
	"github.com/quorumlock/quorumlock/orders/store"
)

// Created and OutOfStock render the snapshots the service saves, for tests
// that leave in the database what a real attempt would.
func Created(id string, o request.Order) store.Snapshot {
	return snapshot(store.Outcome{Kind: store.OutcomeOrder, ProductID: o.ProductID, Quantity: int64(o.Quantity), Order: store.Order{ID: id}})
}

// OutOfStock: see Created.
func OutOfStock(o request.Order) store.Snapshot {
	return snapshot(store.Outcome{Kind: store.OutcomeOutOfStock, ProductID: o.ProductID, Quantity: int64(o.Quantity)})
}

// NewOrderID makes an order id as the service does.
func NewOrderID(t *testing.T) string {
	t.Helper()
	id, err := newOrderID()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// Queued returns how many requests wait in product's queue.
func (s *Service) Queued(product string) int {
	if s.queues == nil {
		return 0
	}
	s.queues.mu.Lock()
	defer s.queues.mu.Unlock()
	if q := s.queues.queues[product]; q != nil {
		return len(q.waiting)
	}
	return 0
}

// QueuedCarts returns how many carts wait in this instance's queue of carts.
func (s *Service) QueuedCarts() int { return s.Queued(cartQueue) }
