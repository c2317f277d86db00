package store_test

import (
	"context"
	"fmt"

	"github.com/quorumlock/quorumlock/orders/request"
	"github.com/quorumlock/quorumlock/orders/store"
)

// This file writes the tests' single-product orders and batches of them
// as what they are to the store: one-line carts, placed by PlaceCarts.

// placeOrder is one single-product order and the two answers its caller
// rendered for it.
type placeOrder struct {
	UserID         string
	IdempotencyKey request.Key
	Fingerprint    string
	ProductID      string
	Quantity       int64
	Fence          int64 // a token already taken, unless FenceKey is set too
	FenceKey       string
	OrderID        string
	Created        store.Snapshot
	OutOfStock     store.Snapshot
}

// placeOne places p as a one-line cart and returns its outcome and error,
// as the store's single-product entry once did.
func placeOne(ctx context.Context, st *store.Store, p placeOrder) (store.Outcome, error) {
	// Both answers are checked before the transaction, as the
	// single-product entry did: the store checks only the one it saves.
	for _, snap := range []store.Snapshot{p.Created, p.OutOfStock} {
		if snap.Status < 100 || snap.Status > 599 {
			return store.Outcome{}, fmt.Errorf("%w: snapshot status %d", store.ErrInvalid, snap.Status)
		}
	}
	c := store.Cart{
		Order: store.OrderRequest{UserID: p.UserID, IdempotencyKey: p.IdempotencyKey, Fingerprint: p.Fingerprint,
			Quantity: p.Quantity, OrderID: p.OrderID},
		Lines: []store.CartLine{{ProductID: p.ProductID, Quantity: p.Quantity, Fence: p.Fence, FenceKey: p.FenceKey}},
		Snapshot: func(o store.Outcome) store.Snapshot {
			if o.Kind == store.OutcomeOrder {
				return p.Created
			}
			return p.OutOfStock
		},
	}
	res, err := st.PlaceCarts(ctx, []store.Cart{c})
	if err != nil {
		return store.Outcome{}, err
	}
	return res[0].Outcome, res[0].Err
}

// batch is orders for one product, fenced alike.
type batch struct {
	ProductID string
	Orders    []store.OrderRequest
	Fence     int64
	FenceKey  string
	Snapshot  func(store.Outcome) store.Snapshot
}

// carts returns b's orders as one-line carts.
func (b batch) carts() []store.Cart {
	carts := make([]store.Cart, len(b.Orders))
	for i, o := range b.Orders {
		carts[i] = store.Cart{Order: o, Snapshot: b.Snapshot,
			Lines: []store.CartLine{{ProductID: b.ProductID, Quantity: o.Quantity, Fence: b.Fence, FenceKey: b.FenceKey}}}
	}
	return carts
}

// batchResult is a batch's results and the stock left after it (-1 when
// every order replayed).
type batchResult struct {
	Orders []store.Placed
	Left   int64
}

// placeBatch places b's orders in one transaction.
func placeBatch(ctx context.Context, st *store.Store, b batch) (batchResult, error) {
	res, err := st.PlaceCarts(ctx, b.carts())
	if err != nil {
		return batchResult{}, err
	}
	out := batchResult{Orders: make([]store.Placed, len(res)), Left: -1}
	for i, r := range res {
		out.Orders[i] = r.Placed
		if r.Left != nil {
			out.Left = r.Left[0]
		}
	}
	return out, nil
}

// placeCart places one cart.
func placeCart(ctx context.Context, st *store.Store, c store.Cart) (store.CartResult, error) {
	res, err := st.PlaceCarts(ctx, []store.Cart{c})
	if err != nil {
		return store.CartResult{}, err
	}
	return res[0], nil
}
