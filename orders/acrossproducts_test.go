package orders_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/orders"
)

// buy is the body of an order of one unit of product.
func buy(product string) string {
	return fmt.Sprintf(`{"productId": %q, "quantity": 1, "addressVersion": "v1", "couponId": null}`, product)
}

// queuedAll counts the single orders queued for products (each product
// counted once).
func queuedAll(in *instance, products []string) int {
	seen, n := map[string]bool{}, 0
	for _, p := range products {
		if !seen[p] {
			seen[p] = true
			n += in.svc.Queued(p)
		}
	}
	return n
}

// Orders for different products that queue on one instance are placed in
// one transaction under one lease on all their products; a product that
// runs out partway answers its later orders with the saved 409 and leaves
// the rest of the batch as it was.
func TestOrdersForDifferentProductsShareABatch(t *testing.T) {
	r := newRig(t, 10)
	r.seedCart(t, 1) // products 1, 2, 3: one unit each
	if err := r.st.SeedProduct(context.Background(), "4", 2, 100); err != nil {
		t.Fatal(err)
	}
	g := r.gated(t)
	in := r.instance(t, orders.WithLocker(g), orders.WithLockRule(orders.LockAlways))
	keys := []string{"x", "y", "z", "a", "b", "c", "d", "e", "f"}
	products := []string{"42", "3", "3", "1", "2", "1", "2", "4", "4"}
	// x leads a batch of a quiet product; y and z, two orders for product
	// 3, lead a contended one: both lanes are taken, at the gate.
	waits := []func() bool{
		func() bool { return g.arrived.Load() == 1 },
		func() bool { return in.svc.Queued("3") == 1 },
		func() bool { return g.arrived.Load() == 2 && in.svc.Queued("3") == 0 },
	}
	for i := 3; i < len(keys); i++ {
		waits = append(waits, func() bool { return queuedAll(in, []string{"1", "2", "4"}) == i-2 })
	}
	got := make([]answer, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Go(func() { got[i] = post(t, in, "u-"+k, k, buy(products[i])) })
		eventually(t, 10*time.Second, k+" at the gate or queued", waits[i])
	}
	close(g.open)
	wg.Wait()
	c, o := http.StatusCreated, http.StatusConflict
	want := []int{c, c, o, c, c, o, o, c, c}
	for i, a := range got {
		if a.Status != want[i] {
			t.Errorf("%s (product %s): %d %s, want %d", keys[i], products[i], a.Status, a.Body, want[i])
		}
	}
	if n := g.leases.Load(); n != 3 {
		t.Fatalf("%d leases, want 3: x's, y and z's, then one on products 1, 2 and 4", n)
	}
	var txs int
	err := r.pool.QueryRow(context.Background(),
		`SELECT count(DISTINCT xmin::text) FROM orders WHERE idempotency_key IN ('a', 'b', 'e', 'f')`).Scan(&txs)
	if err != nil || txs != 1 {
		t.Fatalf("the four orders of the batch were written by %d transactions (%v), want 1", txs, err)
	}
	if s := r.available(t, "1", "2", "3", "4"); fmt.Sprint(s) != "[0 0 0 0]" {
		t.Fatalf("stock %v, want [0 0 0 0]", s)
	}
	r.noViolations(t)
}

// With the default rule an order for a product that has no company on the
// instance takes no lock: the fence Postgres takes and the conditional
// decrement arbitrate, and nothing is oversold.
func TestQuietOrdersTakeNoLock(t *testing.T) {
	r := newRig(t, 10)
	r.seedCart(t, 1)
	g := r.gated(t)
	close(g.open)
	in := r.instance(t, orders.WithLocker(g))
	for i, p := range []string{"1", "2", "3", "1"} {
		a := post(t, in, "u", fmt.Sprint("q", i), buy(p))
		if want := map[bool]int{true: http.StatusConflict, false: http.StatusCreated}[i == 3]; a.Status != want {
			t.Fatalf("order %d of product %s: %d %s, want %d", i, p, a.Status, a.Body, want)
		}
	}
	if n := g.arrived.Load(); n != 0 {
		t.Fatalf("%d lock calls for orders with no company, want 0", n)
	}
	r.noViolations(t)
}
