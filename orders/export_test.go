package orders

import (
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/quorumlock/quorumlock/orders/internal/transport"
	"github.com/quorumlock/quorumlock/orders/request"
	"github.com/quorumlock/quorumlock/orders/store"
)

// Created and OutOfStock render the snapshots the service saves, for tests
// that leave in the database what a real attempt would.
func Created(id string, o request.Order) store.Snapshot {
	return transport.Snapshot(store.Outcome{Kind: store.OutcomeOrder, ProductID: o.ProductID, Quantity: int64(o.Quantity), Order: store.Order{ID: id}})
}

// OutOfStock: see Created.
func OutOfStock(o request.Order) store.Snapshot {
	return transport.Snapshot(store.Outcome{Kind: store.OutcomeOutOfStock, ProductID: o.ProductID, Quantity: int64(o.Quantity)})
}

// NewOrderID makes an order id of the service's form: "ord_" and 128
// random bits in hex.
func NewOrderID(t *testing.T) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "ord_" + hex.EncodeToString(b[:])
}

// Queued returns how many requests wait in product's queue.
func (s *Service) Queued(product string) int { return s.placer.Queued(product) }

// QueuedCarts returns how many carts of several products wait in this
// instance's queue of carts.
func (s *Service) QueuedCarts() int { return s.placer.Queued("") }
