package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quorumlock/quorumlock/fencing"
	"github.com/quorumlock/quorumlock/orders/request"
	"github.com/quorumlock/quorumlock/orders/store"
)

// This example is the database half of POST /orders: take a fence for the
// product's stock (here straight from the issuer, as the Postgres-only
// fallback does; with the lock held it is the lease's FenceOf), place the
// order (a one-line cart), and answer with the saved snapshot.
func ExampleStore_PlaceCarts() {
	ctx := context.Background()
	dsn := os.Getenv("DATABASE_URL")
	if _, err := store.MigrateDSN(ctx, dsn); err != nil {
		fmt.Println(err)
		return
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	st, _ := store.New(pool)
	issuer, _ := fencing.NewIssuer(pool)

	fence, err := issuer.Next(ctx, "stock:42")
	if err != nil {
		fmt.Println(err)
		return
	}
	// The caller makes the order id and renders the answer the
	// transaction calls for; the store saves it.
	const id = "ord_0001"
	cart := store.Cart{
		Order: store.OrderRequest{UserID: "u1001", IdempotencyKey: request.MustKey("req-001"),
			Fingerprint: "sha256-of-the-canonical-request", Quantity: 1, OrderID: id},
		Lines: []store.CartLine{{ProductID: "42", Quantity: 1, Fence: fence}},
		Snapshot: func(o store.Outcome) store.Snapshot {
			if o.Kind == store.OutcomeOrder {
				return store.Snapshot{Status: 201, Body: []byte(`{"orderId":"` + o.Order.ID + `"}`)}
			}
			return store.Snapshot{Status: 409, Body: []byte(`{"title":"Out of stock"}`)}
		},
	}
	res, err := st.PlaceCarts(ctx, []store.Cart{cart})
	if err == nil {
		err = res[0].Err
	}
	switch {
	case err == nil, errors.Is(err, store.ErrOutOfStock):
		// A saved outcome: send it as is, and mark the idempotency record
		// SUCCESS with it.
		out := res[0].Outcome
		fmt.Println(out.ResponseStatus, string(out.ResponseBody), "replayed:", out.Replayed)
	case errors.Is(err, store.ErrFingerprintMismatch):
		fmt.Println("409: key reused with a different request")
	case errors.Is(err, store.ErrStaleFence):
		fmt.Println("lease superseded: retry with a new fence")
	case errors.Is(err, store.ErrUnknownProduct), errors.Is(err, store.ErrInvalid):
		fmt.Println("4xx:", err)
	default:
		fmt.Println("503:", err)
	}
}
