package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/quorumlock/quorumlock/fencing"
	"github.com/quorumlock/quorumlock/orders/request"
	"github.com/quorumlock/quorumlock/orders/store"
)

// batchOrder is one order of a test batch: user u, key k, quantity q.
func batchOrder(u, k string, q int64) store.OrderRequest {
	return store.OrderRequest{UserID: u, IdempotencyKey: request.MustKey(k), Fingerprint: "fp-" + k,
		Quantity: q, OrderID: "ord_" + u + "_" + k}
}

// snapshotOf renders a test snapshot that names the outcome.
func snapshotOf(o store.Outcome) store.Snapshot {
	if o.Kind == store.OutcomeOrder {
		return store.Snapshot{Status: 201, Body: []byte(`{"orderId":"` + o.Order.ID + `"}`)}
	}
	return store.Snapshot{Status: 409, Body: []byte(fmt.Sprintf(`{"short":%d}`, o.Quantity))}
}

// testPlaceBatch covers one transaction for many orders: first come, first
// served when the stock runs out, a key given twice, a saved key, and the
// fences (reserved, taken, stale).
func testPlaceBatch(t *testing.T, srv pgServer) {
	t.Run("OutOfStockMidBatchIsFirstComeFirstServed", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := ctxT(t)
		e.seed(t, "42", 5, 100)
		b := batch{ProductID: "42", FenceKey: "stock:42", Snapshot: snapshotOf, Orders: []store.OrderRequest{
			batchOrder("a", "k1", 2), batchOrder("b", "k1", 3), batchOrder("c", "k1", 1), batchOrder("d", "k1", 1)}}
		res, err := placeBatch(ctx, e.st, b)
		if err != nil {
			t.Fatal(err)
		}
		out := res.Orders
		if res.Left != 0 {
			t.Fatalf("left %d, want 0", res.Left)
		}
		want := []error{nil, nil, store.ErrOutOfStock, store.ErrOutOfStock}
		for i, p := range out {
			if (want[i] == nil) != (p.Err == nil) || (want[i] != nil && !errors.Is(p.Err, want[i])) {
				t.Fatalf("order %d: %v, want %v", i, p.Err, want[i])
			}
		}
		if s := e.stock(t, "42"); s.Available != 0 || s.LastFence != 1 {
			t.Fatalf("stock %+v, want 0 left and fence 1", s)
		}
		// Every outcome replays, the rejections too.
		again, err := placeBatch(ctx, e.st, b)
		if err != nil || again.Left != -1 {
			t.Fatalf("replays: left %d, %v; want -1: the stock was not read", again.Left, err)
		}
		for i, p := range again.Orders {
			if !p.Outcome.Replayed || string(p.Outcome.ResponseBody) != string(out[i].Outcome.ResponseBody) {
				t.Fatalf("order %d replayed %+v, want the saved %s", i, p.Outcome, out[i].Outcome.ResponseBody)
			}
		}
	})

	t.Run("ADuplicateKeyGetsTheFirstAnswer", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := ctxT(t)
		e.seed(t, "42", 10, 100)
		other := batchOrder("a", "k1", 1)
		other.Fingerprint, other.OrderID = "fp-other", "ord_other"
		b := batch{ProductID: "42", FenceKey: "stock:42", Snapshot: snapshotOf, Orders: []store.OrderRequest{
			batchOrder("a", "k1", 1), batchOrder("a", "k1", 1), other}}
		res, err := placeBatch(ctx, e.st, b)
		if err != nil {
			t.Fatal(err)
		}
		out := res.Orders
		if out[0].Err != nil || out[0].Outcome.Replayed || out[1].Err != nil || !out[1].Outcome.Replayed ||
			out[1].Outcome.Order.ID != out[0].Outcome.Order.ID {
			t.Fatalf("first %+v, second %+v: want one order, the second a replay of it", out[0], out[1])
		}
		if !errors.Is(out[2].Err, store.ErrFingerprintMismatch) {
			t.Fatalf("same key, other request: %v", out[2].Err)
		}
		if s := e.stock(t, "42"); s.Available != 9 {
			t.Fatalf("stock %d, want 9: one order", s.Available)
		}
	})

	t.Run("AllShortMovesNeitherStockNorFence", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := ctxT(t)
		e.seed(t, "42", 1, 100)
		res, err := placeBatch(ctx, e.st, batch{ProductID: "42", FenceKey: "stock:42", Snapshot: snapshotOf,
			Orders: []store.OrderRequest{batchOrder("a", "k", 2), batchOrder("b", "k", 3)}})
		if err != nil || !errors.Is(res.Orders[0].Err, store.ErrOutOfStock) || !errors.Is(res.Orders[1].Err, store.ErrOutOfStock) || res.Left != 1 {
			t.Fatalf("%+v, %v; want both short and 1 left", res, err)
		}
		if s := e.stock(t, "42"); s.Available != 1 || s.LastFence != 0 {
			t.Fatalf("stock %+v moved on rejections alone", s)
		}
	})

	t.Run("AReservedFenceIsTakenOnce", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := ctxT(t)
		e.seed(t, "42", 10, 100)
		res, err := fencing.NewReserver(e.pool)
		if err != nil {
			t.Fatal(err)
		}
		// Two holders reserve the same token, as a lease that expired and
		// the next one can: the first to write takes it, the other is stale.
		f1, _ := res.Next(ctx, "stock:42")
		f2, _ := res.Next(ctx, "stock:42")
		if f1 != 1 || f2 != 1 {
			t.Fatalf("reserved %d and %d, want 1 twice", f1, f2)
		}
		batch := func(k string, f int64) error {
			_, err := placeBatch(ctx, e.st, batch{ProductID: "42", Fence: f, FenceKey: "stock:42", Snapshot: snapshotOf,
				Orders: []store.OrderRequest{batchOrder("a", k, 1)}})
			return err
		}
		if err := batch("k1", f1); err != nil {
			t.Fatal(err)
		}
		if err := batch("k2", f2); !errors.Is(err, store.ErrStaleFence) {
			t.Fatalf("second holder of token 1: %v, want ErrStaleFence", err)
		}
		// A writer that takes its token inside its transaction makes a
		// reservation taken before it stale too.
		f3, _ := res.Next(ctx, "stock:42")
		if err := batch("k3", 0); err != nil {
			t.Fatal(err)
		}
		if err := batch("k4", f3); !errors.Is(err, store.ErrStaleFence) {
			t.Fatalf("reservation overtaken by an in-transaction token: %v, want ErrStaleFence", err)
		}
		if s := e.stock(t, "42"); s.Available != 8 {
			t.Fatalf("stock %d, want 8: the stale batches wrote nothing", s.Available)
		}
	})

	t.Run("SoldOutOutcomesAreSavedOnce", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := ctxT(t)
		e.seed(t, "42", 1, 100)
		b := batch{ProductID: "42", FenceKey: "stock:42", Snapshot: snapshotOf, Orders: []store.OrderRequest{batchOrder("a", "k", 1)}}
		if res, err := placeBatch(ctx, e.st, b); err != nil || res.Orders[0].Err != nil {
			t.Fatalf("%+v, %v", res, err)
		}
		// The fast path saves a rejection for new keys only: a key with an
		// order goes back to the normal path, which replays it.
		sold := batch{ProductID: "42", Snapshot: snapshotOf, Orders: []store.OrderRequest{
			batchOrder("a", "k", 1), batchOrder("b", "k", 1), batchOrder("b", "k", 1)}}
		out, err := e.st.SaveOutOfStock(ctx, sold.carts())
		if err != nil {
			t.Fatal(err)
		}
		if out[0].Outcome.Kind != "" || !errors.Is(out[1].Err, store.ErrOutOfStock) || out[2].Outcome.Kind != "" {
			t.Fatalf("saved %+v: want only b's rejection, once", out)
		}
		got, err := e.st.Lookup(ctx, "b", request.MustKey("k"))
		if err != nil || got.Kind != store.OutcomeOutOfStock || string(got.ResponseBody) != `{"short":1}` {
			t.Fatalf("lookup %+v, %v", got, err)
		}
		if s := e.stock(t, "42"); s.Available != 0 {
			t.Fatalf("stock %d", s.Available)
		}
	})

	t.Run("UnrenderedAnswersWriteNothing", func(t *testing.T) {
		// A renderer whose snapshot has no HTTP status fails the whole
		// transaction: nothing is saved that could not be replayed.
		t.Parallel()
		e := newEnv(t, srv)
		ctx := ctxT(t)
		e.seed(t, "42", 1, 100)
		for name, status := range map[string]int{"created": 0, "out of stock": 600} {
			b := batch{ProductID: "42", FenceKey: "stock:42", Orders: []store.OrderRequest{batchOrder("a", "k1", 1), batchOrder("b", "k2", 1)},
				Snapshot: func(o store.Outcome) store.Snapshot {
					s := snapshotOf(o)
					if (o.Kind == store.OutcomeOrder) == (name == "created") {
						s.Status = status
					}
					return s
				}}
			if _, err := placeBatch(ctx, e.st, b); !errors.Is(err, store.ErrInvalid) {
				t.Errorf("%s: %v, want ErrInvalid", name, err)
			}
		}
		if s := e.stock(t, "42"); s.Available != 1 || s.LastFence != 0 {
			t.Fatalf("stock %+v", s)
		}
		if n, m := e.count(t, "orders"), e.count(t, "request_outcomes"); n != 0 || m != 0 {
			t.Fatalf("%d orders, %d outcomes", n, m)
		}
	})

	t.Run("BadBatchesWriteNothing", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := context.Background()
		e.seed(t, "42", 10, 100)
		for name, b := range map[string]batch{
			"no orders":   {ProductID: "42", FenceKey: "stock:42", Snapshot: snapshotOf},
			"no renderer": {ProductID: "42", FenceKey: "stock:42", Orders: []store.OrderRequest{batchOrder("a", "k", 1)}},
			"no fence":    {ProductID: "42", Snapshot: snapshotOf, Orders: []store.OrderRequest{batchOrder("a", "k", 1)}},
			"bad order":   {ProductID: "42", FenceKey: "stock:42", Snapshot: snapshotOf, Orders: []store.OrderRequest{batchOrder("a", "k", 0)}},
		} {
			if _, err := placeBatch(ctx, e.st, b); !errors.Is(err, store.ErrInvalid) {
				t.Errorf("%s: %v, want ErrInvalid", name, err)
			}
		}
		if s := e.stock(t, "42"); s.Available != 10 || s.LastFence != 0 {
			t.Fatalf("stock %+v", s)
		}
	})
}
