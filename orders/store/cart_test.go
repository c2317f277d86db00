package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/fencing"
	"github.com/quorumlock/quorumlock/orders/store"
)

// cartOf is a test cart of user u under key k: lines of "product=quantity",
// sorted by the caller, each fenced by the transaction itself (Fence 0).
func cartOf(u, k string, lines ...string) store.Cart {
	c := store.Cart{Order: batchOrder(u, k, 0), Snapshot: snapshotOf}
	for _, l := range lines {
		var p string
		var q int64
		if _, err := fmt.Sscanf(l, "%1s=%d", &p, &q); err != nil {
			panic(err)
		}
		c.Lines = append(c.Lines, store.CartLine{ProductID: p, Quantity: q, FenceKey: "stock:" + p})
		c.Order.Quantity += q
	}
	return c
}

// stocks reads the available units and last fence of products.
func (e *env) stocks(t *testing.T, products ...string) []store.Stock {
	out := make([]store.Stock, len(products))
	for i, p := range products {
		out[i] = e.stock(t, p)
	}
	return out
}

// testPlaceCart covers a cart's one transaction: every line or none.
func testPlaceCart(t *testing.T, srv pgServer) {
	t.Run("EveryLineIsSoldAndReplays", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := ctxT(t)
		e.seed(t, "1", 5, 100)
		e.seed(t, "2", 5, 30)
		c := cartOf("u", "k", "1=2", "2=3")
		res, err := placeCart(ctx, e.st, c)
		if err != nil || res.Err != nil {
			t.Fatal(err, res.Err)
		}
		o := res.Outcome.Order
		if o.AmountCents != 2*100+3*30 || o.Quantity != 5 || o.ProductID != "" || len(o.Lines) != 2 || !slices.Equal(res.Left, []int64{3, 2}) {
			t.Fatalf("order %+v, left %v", o, res.Left)
		}
		got, err := e.st.GetOrder(ctx, o.ID)
		if err != nil || !slices.Equal(got.Lines, o.Lines) {
			t.Fatalf("GetOrder lines %+v, want %+v (%v)", got.Lines, o.Lines, err)
		}
		var payload string
		if err := e.pool.QueryRow(ctx, `SELECT payload->>'lines' FROM order_events WHERE order_id = $1`, o.ID).Scan(&payload); err != nil {
			t.Fatal(err)
		}
		if want := `[{"quantity": 2, "productId": "1", "amountCents": 200}, {"quantity": 3, "productId": "2", "amountCents": 90}]`; payload != want {
			t.Fatalf("the creation event's lines %s, want %s", payload, want)
		}
		again, err := placeCart(ctx, e.st, c)
		if err != nil || !again.Outcome.Replayed || string(again.Outcome.ResponseBody) != string(res.Outcome.ResponseBody) {
			t.Fatalf("replay %+v, %v", again, err)
		}
		other := c
		other.Order.Fingerprint = "fp-other"
		if res, _ := placeCart(ctx, e.st, other); !errors.Is(res.Err, store.ErrFingerprintMismatch) {
			t.Fatalf("the key reused for another cart: %v", res.Err)
		}
		if s := e.stocks(t, "1", "2"); s[0].Available != 3 || s[1].Available != 2 {
			t.Fatalf("stock %+v after a replay and a mismatch", s)
		}
		noViolations(t, e)
	})

	t.Run("AShortLastLineLeavesEveryRowAsItWas", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := ctxT(t)
		for _, p := range []string{"1", "2", "3"} {
			e.seed(t, p, 2, 10)
		}
		before := e.stocks(t, "1", "2", "3")
		res, err := placeCart(ctx, e.st, cartOf("u", "k", "1=1", "2=2", "3=3"))
		if err != nil || !errors.Is(res.Err, store.ErrOutOfStock) {
			t.Fatalf("got %v, %v; want ErrOutOfStock", err, res.Err)
		}
		if want := []store.ShortLine{{ProductID: "3", Quantity: 3, Available: 2}}; !slices.Equal(res.Outcome.Short, want) {
			t.Fatalf("short lines %+v, want %+v", res.Outcome.Short, want)
		}
		if after := e.stocks(t, "1", "2", "3"); !slices.Equal(after, before) {
			t.Fatalf("stock %+v, want it as it was: %+v", after, before)
		}
		if n := e.count(t, "order_lines"); n != 0 {
			t.Fatalf("%d order lines written", n)
		}
		again, err := placeCart(ctx, e.st, cartOf("u", "k", "1=1", "2=2", "3=3"))
		if err != nil || !again.Outcome.Replayed || again.Outcome.ResponseStatus != 409 {
			t.Fatalf("the saved 409 did not replay: %+v, %v", again, err)
		}
		noViolations(t, e)
	})

	t.Run("AnUnknownOrStaleLineWritesNothing", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := ctxT(t)
		e.seed(t, "1", 5, 10)
		e.seed(t, "2", 5, 10)
		if _, err := placeCart(ctx, e.st, cartOf("u", "k1", "1=1", "9=1")); !errors.Is(err, store.ErrUnknownProduct) {
			t.Fatalf("unknown product: %v", err)
		}
		stale := cartOf("u", "k2", "1=1", "2=1")
		stale.Lines[1].Fence, stale.Lines[1].FenceKey = 1, "" // a token some later holder passed
		if _, err := e.pool.Exec(ctx, `UPDATE product_stock SET last_fence = 5 WHERE product_id = '2'`); err != nil {
			t.Fatal(err)
		}
		if _, err := placeCart(ctx, e.st, stale); !errors.Is(err, store.ErrStaleFence) {
			t.Fatalf("stale fence: %v", err)
		}
		if s := e.stocks(t, "1", "2"); s[0].Available != 5 || s[1].Available != 5 || s[0].LastFence != 0 {
			t.Fatalf("stock %+v: a refused cart wrote", s)
		}
		if n := e.count(t, "request_outcomes") + e.count(t, "orders"); n != 0 {
			t.Fatalf("%d outcomes saved for refused carts", n)
		}
	})

	t.Run("CancelAndExpiryRestockEveryLineOnce", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := ctxT(t)
		e.seed(t, "1", 5, 10)
		e.seed(t, "2", 5, 10)
		a, err := placeCart(ctx, e.st, cartOf("u", "ka", "1=2", "2=1"))
		if err != nil || a.Err != nil {
			t.Fatal(err, a.Err)
		}
		b, err := placeCart(ctx, e.st, cartOf("u", "kb", "1=1", "2=3"))
		if err != nil || b.Err != nil {
			t.Fatal(err, b.Err)
		}
		for range 2 {
			if _, err := e.st.Cancel(ctx, a.Outcome.Order.ID); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(10 * time.Millisecond) // the hold below is 1 ms: b is due
		for range 2 {
			if _, err := e.st.ExpireOrders(ctx, time.Millisecond, 10); err != nil {
				t.Fatal(err)
			}
		}
		if s := e.stocks(t, "1", "2"); s[0].Available != 5 || s[1].Available != 5 {
			t.Fatalf("stock %+v, want every unit back once", s)
		}
		noViolations(t, e)
	})

	t.Run("OverlappingCartsNeitherDeadlockNorOversell", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		for _, p := range []string{"1", "2", "3"} {
			e.seed(t, p, 40, 10)
		}
		sets := [][]string{{"1=1", "2=1"}, {"2=1", "3=1"}, {"1=1", "3=1"}, {"1=1", "2=1", "3=1"}}
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for w := range 8 {
			wg.Go(func() {
				for i := range 8 {
					c := cartOf(fmt.Sprint("u", w), fmt.Sprint("k", i), sets[(w+i)%len(sets)]...)
					if _, err := placeCart(context.Background(), e.st, c); err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		noViolations(t, e)
	})

	t.Run("ReservedFencesAreTaken", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := ctxT(t)
		e.seed(t, "1", 5, 10)
		e.seed(t, "2", 5, 10)
		r, err := fencing.NewReserver(e.pool)
		if err != nil {
			t.Fatal(err)
		}
		c := cartOf("u", "k", "1=1", "2=1")
		for i := range c.Lines {
			if c.Lines[i].Fence, err = r.Next(ctx, c.Lines[i].FenceKey); err != nil {
				t.Fatal(err)
			}
		}
		if res, err := placeCart(ctx, e.st, c); err != nil || res.Err != nil {
			t.Fatal(err, res.Err)
		}
		// The tokens are the keys' last ones now: a second cart with the
		// same reservation is stale.
		c2 := c
		c2.Order = batchOrder("u", "k2", 2)
		if _, err := placeCart(ctx, e.st, c2); !errors.Is(err, store.ErrStaleFence) {
			t.Fatalf("a reused reservation: %v", err)
		}
	})

	t.Run("ABatchOfCartsIsFirstComeFirstServed", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := ctxT(t)
		e.seed(t, "1", 3, 10)
		e.seed(t, "2", 2, 20)
		e.seed(t, "3", 5, 30)
		if _, err := placeCart(ctx, e.st, cartOf("u0", "k", "1=1", "3=1")); err != nil { // saved before the batch
			t.Fatal(err)
		}
		carts := []store.Cart{
			cartOf("u0", "k", "1=1", "3=1"), // replayed
			cartOf("u1", "k", "1=1", "2=2"), // takes both of 2
			cartOf("u2", "k", "2=1", "3=1"), // short on 2: takes nothing
			cartOf("u3", "k", "1=1", "3=4"), // 1 and 3 still cover it
			cartOf("u1", "k", "1=1", "2=2"), // the same key again: the first answer
		}
		res, err := e.st.PlaceCarts(ctx, carts)
		if err != nil {
			t.Fatal(err)
		}
		wantErr := []error{nil, nil, store.ErrOutOfStock, nil, nil}
		for i, r := range res {
			if (r.Err == nil) != (wantErr[i] == nil) || (wantErr[i] != nil && !errors.Is(r.Err, wantErr[i])) {
				t.Fatalf("cart %d: %v, want %v", i, r.Err, wantErr[i])
			}
		}
		if !res[0].Outcome.Replayed || !res[4].Outcome.Replayed || res[4].Outcome.Order.ID != res[1].Outcome.Order.ID {
			t.Fatalf("replays: %+v / %+v", res[0].Outcome, res[4].Outcome)
		}
		if want := []store.ShortLine{{ProductID: "2", Quantity: 1, Available: 0}}; !slices.Equal(res[2].Outcome.Short, want) {
			t.Fatalf("short lines %+v, want %+v", res[2].Outcome.Short, want)
		}
		if s := e.stocks(t, "1", "2", "3"); s[0].Available != 0 || s[1].Available != 0 || s[2].Available != 0 {
			t.Fatalf("stock %+v, want 0 0 0", s)
		}
		if !slices.Equal(res[3].Left, []int64{0, 0}) {
			t.Fatalf("left after cart 3: %v", res[3].Left)
		}
		noViolations(t, e)
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		for _, c := range []store.Cart{
			cartOf("u", "k"),
			cartOf("u", "k", "2=1", "1=1"),
			cartOf("u", "k", "1=1", "1=1"),
			cartOf("u", "k", "1=0", "2=1"),
			func() store.Cart { c := cartOf("u", "k", "1=1", "2=1"); c.Order.Quantity = 3; return c }(),
			func() store.Cart { c := cartOf("u", "k", "1=1", "2=1"); c.Snapshot = nil; return c }(),
		} {
			if _, err := placeCart(ctxT(t), e.st, c); !errors.Is(err, store.ErrInvalid) {
				t.Errorf("%+v: %v, want ErrInvalid", c.Lines, err)
			}
		}
	})
}

// noViolations checks every invariant of the database.
func noViolations(t *testing.T, e *env) {
	t.Helper()
	vs, err := store.CheckInvariants(ctxT(t), e.pool)
	if err != nil || len(vs) != 0 {
		t.Fatalf("invariants: %q, %v", vs, err)
	}
}
