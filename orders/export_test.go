package orders

import (
	"testing"

	"github.com/quorumlock/quorumlock/orders/request"
	"github.com/quorumlock/quorumlock/orders/store"
)

// Created and OutOfStock render the snapshots the service saves, for tests
// that leave in the database what a real attempt would.
func Created(id string, o request.Order) store.Snapshot { return created(id, o) }

// OutOfStock: see Created.
func OutOfStock(o request.Order) store.Snapshot { return outOfStock(o) }

// NewOrderID makes an order id as the service does.
func NewOrderID(t *testing.T) string {
	t.Helper()
	id, err := newOrderID()
	if err != nil {
		t.Fatal(err)
	}
	return id
}
