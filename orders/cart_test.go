package orders_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/orders"
	"github.com/quorumlock/quorumlock/orders/store"
)

// cartBody is a cart of "product=quantity" lines, in the order given.
func cartBody(lines ...string) string {
	items := make([]string, len(lines))
	for i, l := range lines {
		p, q, _ := strings.Cut(l, "=")
		items[i] = fmt.Sprintf(`{"productId": %q, "quantity": %s}`, p, q)
	}
	return `{"items": [` + strings.Join(items, ", ") + `], "addressVersion": "v1"}`
}

// seedCart stocks products 1, 2 and 3 with n units each (100, 200 and 300
// cents).
func (r *rig) seedCart(t *testing.T, n int64) {
	t.Helper()
	for i, p := range []string{"1", "2", "3"} {
		if err := r.st.SeedProduct(context.Background(), p, n, int64(i+1)*100); err != nil {
			t.Fatal(err)
		}
	}
}

// available returns the stock of products.
func (r *rig) available(t *testing.T, products ...string) []int64 {
	t.Helper()
	out := make([]int64, len(products))
	for i, p := range products {
		s, err := r.st.Stock(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = s.Available
	}
	return out
}

// noViolations checks every invariant of the database.
func (r *rig) noViolations(t *testing.T) {
	t.Helper()
	vs, err := store.CheckInvariants(context.Background(), r.pool)
	if err != nil || len(vs) != 0 {
		t.Fatalf("invariants: %q, %v", vs, err)
	}
}

// A cart over HTTP: created with its items, replayed whatever the order
// of its lines, refused under a reused key, and cancelled back into every
// line's stock once.
func TestCartOrder(t *testing.T) {
	r := newRig(t, 5)
	r.seedCart(t, 5)
	in := r.instance(t)

	a := post(t, in, "u1", "c-1", cartBody("2=1", "1=2"))
	if a.Status != http.StatusCreated {
		t.Fatalf("cart: %d %s", a.Status, a.Body)
	}
	id, _ := a.json(t)["orderId"].(string)
	if want := `"quantity":3,"items":[{"productId":"1","quantity":2,"amountCents":200},{"productId":"2","quantity":1,"amountCents":200}]}`; !strings.HasSuffix(a.Body, want) {
		t.Fatalf("body %s, want it to end %s", a.Body, want)
	}
	if got := r.available(t, "1", "2"); got[0] != 3 || got[1] != 4 {
		t.Fatalf("stock %v", got)
	}
	again := post(t, in, "u1", "c-1", cartBody("1=2", "2=1", "1=2"))
	if again.Status != http.StatusCreated || again.Body != a.Body || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the same cart, lines reordered and one repeated: %d %s", again.Status, again.Body)
	}
	if other := post(t, in, "u1", "c-1", cartBody("1=1", "2=1")); other.Status != http.StatusConflict || !strings.Contains(other.Body, "reused") {
		t.Fatalf("the key reused for another cart: %d %s", other.Status, other.Body)
	}
	got := do(t, http.MethodGet, in.srv.URL+"/orders/"+id, tokenFor(t, "u1"), "", nil)
	if got.Status != http.StatusOK || !strings.Contains(got.Body, `"items":[{"productId":"1","quantity":2,"amountCents":200},{"productId":"2"`) {
		t.Fatalf("GET: %d %s", got.Status, got.Body)
	}
	for range 2 {
		c := do(t, http.MethodPost, in.srv.URL+"/orders/"+id+"/cancel", tokenFor(t, "u1"), "", nil)
		if c.Status != http.StatusOK {
			t.Fatalf("cancel: %d %s", c.Status, c.Body)
		}
	}
	if got := r.available(t, "1", "2"); got[0] != 5 || got[1] != 5 {
		t.Fatalf("stock %v after the cancel, want every unit back once", got)
	}
	r.noViolations(t)
}

// A cart short on its last line sells nothing, and its 409 names the line.
func TestCartShortLineSellsNothing(t *testing.T) {
	r := newRig(t, 5)
	r.seedCart(t, 2)
	in := r.instance(t)
	a := post(t, in, "u1", "s-1", cartBody("1=1", "2=2", "3=3"))
	if a.Status != http.StatusConflict || !strings.Contains(a.Body, `"shortItems":[{"productId":"3","quantity":3,"available":2}]`) {
		t.Fatalf("got %d %s, want a 409 naming line 3", a.Status, a.Body)
	}
	if got := r.available(t, "1", "2", "3"); got[0] != 2 || got[1] != 2 || got[2] != 2 {
		t.Fatalf("stock %v, want it untouched", got)
	}
	if again := post(t, in, "u1", "s-1", cartBody("3=3", "2=2", "1=1")); again.Status != http.StatusConflict || again.Body != a.Body {
		t.Fatalf("the saved 409 did not replay: %d %s", again.Status, again.Body)
	}
	r.noViolations(t)
}

// Bad carts get a 4xx that writes nothing.
func TestCartBadInput(t *testing.T) {
	r := newRig(t, 5)
	r.seedCart(t, 5)
	in := r.instance(t)
	many := make([]string, 21)
	for i := range many {
		many[i] = fmt.Sprintf("p%d=1", i)
	}
	for i, c := range []struct {
		name, body string
		status     int
	}{
		{"empty cart", `{"items": [], "addressVersion": "v1"}`, http.StatusBadRequest},
		{"21 lines", cartBody(many...), http.StatusBadRequest},
		{"zero quantity", cartBody("1=1", "2=0"), http.StatusBadRequest},
		{"conflicting lines", cartBody("1=1", "2=1", "1=2"), http.StatusBadRequest},
		{"unknown product on the last line", cartBody("1=1", "2=1", "404=1"), http.StatusUnprocessableEntity},
		{"both forms", `{"productId": "1", "quantity": 1, "items": [{"productId": "2", "quantity": 1}], "addressVersion": "v1"}`, http.StatusBadRequest},
	} {
		a := post(t, in, "u1", fmt.Sprint("bad-", i), c.body)
		if a.Status != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, a.Status, a.Body, c.status)
		}
	}
	if n := r.orderCount(t, "true"); n != 0 {
		t.Fatalf("%d orders written", n)
	}
	var saved int
	if err := r.pool.QueryRow(context.Background(), `SELECT count(*) FROM request_outcomes`).Scan(&saved); err != nil || saved != 0 {
		t.Fatalf("%d outcomes saved, %v", saved, err)
	}
	if got := r.available(t, "1", "2", "3"); got[0] != 5 || got[1] != 5 || got[2] != 5 {
		t.Fatalf("stock %v", got)
	}
}

// Carts that share products, named in opposite orders, from three
// instances at once: every request is answered (created or out of stock)
// within the lock wait, nothing deadlocks, nothing is oversold.
func TestCartsOverlapInOppositeOrders(t *testing.T) {
	r := newRig(t, 5)
	const stock = 30
	r.seedCart(t, stock)
	ins := []*instance{r.instance(t), r.instance(t), r.instance(t)}
	bodies := []string{cartBody("1=1", "2=1", "3=1"), cartBody("3=1", "2=1", "1=1"), cartBody("2=1", "1=1"), cartBody("3=1", "2=1")}
	const perWorker = 6
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		bad     []string
		slowest time.Duration
	)
	for w := range 12 {
		in := ins[w%len(ins)]
		wg.Go(func() {
			for i := range perWorker {
				start := time.Now()
				a := post(t, in, fmt.Sprint("u", w), fmt.Sprint("k", i), bodies[(w+i)%len(bodies)])
				d := time.Since(start)
				mu.Lock()
				slowest = max(slowest, d)
				if a.Status != http.StatusCreated && a.Status != http.StatusConflict {
					bad = append(bad, fmt.Sprintf("%d %s", a.Status, a.Body))
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("%d requests not answered 201 or 409: %q", len(bad), bad)
	}
	// The instances' lock wait is 3 s; the answer adds a transaction.
	if slowest > 6*time.Second {
		t.Fatalf("the slowest request took %v", slowest)
	}
	t.Logf("slowest request %v", slowest)
	var sold [3]int64
	if err := r.pool.QueryRow(context.Background(), `SELECT
  COALESCE(sum(quantity) FILTER (WHERE product_id = '1'), 0), COALESCE(sum(quantity) FILTER (WHERE product_id = '2'), 0),
  COALESCE(sum(quantity) FILTER (WHERE product_id = '3'), 0) FROM order_lines`).Scan(&sold[0], &sold[1], &sold[2]); err != nil {
		t.Fatal(err)
	}
	for i, left := range r.available(t, "1", "2", "3") {
		if sold[i]+left != stock || left < 0 {
			t.Fatalf("product %d: sold %d, left %d, stocked %d", i+1, sold[i], left, stock)
		}
	}
	r.noViolations(t)
}

// Carts and single orders of one hot product: they wait in one queue, in
// arrival order, and are placed in one batch under one lease on every
// product of the batch: the single orders first, and the carts after
// them find the hot product sold out. Nothing is oversold.
func TestCartsShareAHotProduct(t *testing.T) {
	r := newRig(t, 6)
	r.seedCart(t, 10)
	g := r.gated(t)
	in := r.instance(t, orders.WithLocker(g), orders.WithLockRule(orders.LockAlways))
	keys := keysN("h", 6)
	done := make(chan []answer, 1)
	go func() { done <- queueUp(t, in, g, keys, buy42) }()
	eventually(t, 10*time.Second, "the single orders queued", func() bool { return in.svc.Queued("42") == len(keys)-1 })
	carts := make(chan answer, 3)
	for i := range 3 {
		go func() { carts <- post(t, in, fmt.Sprint("cart-u", i), "cart", cartBody("42=1", "1=1")) }()
		eventually(t, 10*time.Second, "the cart queued", func() bool { return in.svc.QueuedCarts() == i+1 })
	}
	close(g.open)
	for i, a := range <-done {
		if a.Status != http.StatusCreated {
			t.Fatalf("single order %d: %d %s", i, a.Status, a.Body)
		}
	}
	for range 3 {
		if a := <-carts; a.Status != http.StatusConflict {
			t.Fatalf("cart after the stock ran out: %d %s", a.Status, a.Body)
		}
	}
	if r.stock(t) != 0 {
		t.Fatalf("stock of 42 %d, want 0", r.stock(t))
	}
	if s := r.available(t, "1"); s[0] != 10 {
		t.Fatalf("stock of 1 %d, want 10: a short cart takes nothing", s[0])
	}
	// The leader alone, then one batch of everything that queued behind it.
	if n := g.leases.Load(); n != 2 {
		t.Fatalf("%d leases, want 2 (a single order, then a batch of five orders and three carts)", n)
	}
	r.noViolations(t)
}

// Carts queued on one instance are placed in one transaction under one
// lease on all their products, first come first served: a short cart in
// the middle takes nothing and the carts after it are still sold.
func TestCartsAreBatched(t *testing.T) {
	r := newRig(t, 5)
	r.seedCart(t, 2)
	g := r.gated(t)
	in := r.instance(t, orders.WithLocker(g), orders.WithLockRule(orders.LockAlways))
	bodies := []string{cartBody("1=1", "2=1"), cartBody("2=1", "3=1"), cartBody("1=1", "2=1"), cartBody("3=1", "1=1")}
	want := []int{http.StatusCreated, http.StatusCreated, http.StatusConflict, http.StatusCreated}
	got := make([]answer, len(bodies))
	var wg sync.WaitGroup
	for i, b := range bodies {
		wg.Go(func() { got[i] = post(t, in, fmt.Sprint("u", i), "k", b) })
		if i == 0 {
			eventually(t, 10*time.Second, "the first cart at the gate", func() bool { return g.arrived.Load() == 1 })
			continue
		}
		eventually(t, 10*time.Second, "the cart queued", func() bool { return in.svc.QueuedCarts() == i })
	}
	close(g.open)
	wg.Wait()
	for i, a := range got {
		if a.Status != want[i] {
			t.Errorf("cart %d: %d %s, want %d", i, a.Status, a.Body, want[i])
		}
	}
	if n := g.leases.Load(); n != 2 {
		t.Fatalf("%d leases for 4 carts, want 2 (the leader's, then one batch)", n)
	}
	if s := r.available(t, "1", "2", "3"); s[0] != 0 || s[1] != 0 || s[2] != 0 {
		t.Fatalf("stock %v, want 0 0 0", s)
	}
	r.noViolations(t)
}
