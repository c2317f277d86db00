package orders_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/fencing"
	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/orders"
	"github.com/quorumlock/quorumlock/orders/auth"
	"github.com/quorumlock/quorumlock/orders/request"
	"github.com/quorumlock/quorumlock/orders/store"
	"github.com/quorumlock/quorumlock/quorum"
)

// gateLocker is the service's stock lock, on real masters, with a gate
// that holds every Lock until it opens, a count of the leases it gave, and
// a hook run on each lease before it is handed out.
type gateLocker struct {
	lease.Locker
	open    chan struct{}
	leases  atomic.Int32
	arrived atomic.Int32 // LockMulti calls that reached the gate
	hook    func(n int32, l lease.Lease)
}

func (g *gateLocker) LockMulti(ctx context.Context, keys ...string) (lease.Lease, error) {
	g.arrived.Add(1)
	select {
	case <-g.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	l, err := g.Locker.LockMulti(ctx, keys...)
	if err == nil {
		n := g.leases.Add(1)
		if g.hook != nil {
			g.hook(n, l)
		}
	}
	return l, err
}

// gated returns a gateLocker on a quorum Locker of its own.
func (r *rig) gated(t *testing.T) *gateLocker {
	t.Helper()
	res, err := fencing.NewReserver(r.pool)
	if err != nil {
		t.Fatal(err)
	}
	var clients []redis.UniversalClient
	for _, c := range bedtest.RedisClients(t, r.bed) {
		clients = append(clients, c)
	}
	ql, err := quorum.New(clients, quorum.WithTTL(5*time.Second), quorum.WithMaxWait(3*time.Second),
		quorum.WithNodeTimeout(time.Second), quorum.WithFencer(res))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ql.Close() })
	return &gateLocker{Locker: ql, open: make(chan struct{})}
}

// queueUp posts one request per key, in order, each only once the one
// before it is in the product's queue behind the gate, so that the queue
// holds them in that order; it returns the answers once all have come.
func queueUp(t *testing.T, in *instance, g *gateLocker, keys []string, body string) []answer {
	t.Helper()
	out := make([]answer, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Go(func() { out[i] = post(t, in, "u-"+k, k, body) })
		if i == 0 {
			eventually(t, 10*time.Second, "the leader at the gate", func() bool { return g.arrived.Load() == 1 })
			continue
		}
		eventually(t, 10*time.Second, fmt.Sprintf("%s queued", k), func() bool { return in.svc.Queued("42") == i })
	}
	wg.Wait()
	return out
}

// eventually waits, polling, until cond holds, at most d.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func keysN(prefix string, n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("%s-%02d", prefix, i)
	}
	return ks
}

// A product's queued requests are placed in one transaction under one
// lease and one fence, first come first served: when the stock runs out
// partway, the later ones get the saved out-of-stock answer.
func TestBatchUnderOneLease(t *testing.T) {
	r := newRig(t, 5)
	g := r.gated(t)
	in := r.instance(t, orders.WithLocker(g), orders.WithLockRule(orders.LockAlways))
	keys := keysN("b", 8)
	done := make(chan []answer, 1)
	go func() { done <- queueUp(t, in, g, keys, buy42) }()
	eventually(t, 10*time.Second, "every request queued", func() bool { return in.svc.Queued("42") == len(keys)-1 })
	close(g.open)
	answers := <-done
	for i, a := range answers {
		want := http.StatusCreated
		if i >= 5 {
			want = http.StatusConflict
		}
		if a.Status != want {
			t.Errorf("%s (arrival %d): %d %s, want %d", keys[i], i, a.Status, a.Body, want)
		}
	}
	// The leader's own request went first, alone; the seven behind it
	// waited for one batch: two leases in all, one fence per lease.
	if n := g.leases.Load(); n != 2 {
		t.Fatalf("%d leases for %d orders, want 2 (the leader's, then one batch)", n, len(keys))
	}
	var fences int
	if err := r.pool.QueryRow(context.Background(), `SELECT count(DISTINCT fence) FROM orders`).Scan(&fences); err != nil || fences != 2 {
		t.Fatalf("%d distinct fences over the orders, %v; want 2", fences, err)
	}
	if s := r.stock(t); s != 0 {
		t.Fatalf("stock %d, want 0", s)
	}
}

// A request whose context ends while it waits in the queue leaves it and
// writes nothing; the others are placed.
func TestCancelledRequestLeavesTheQueue(t *testing.T) {
	r := newRig(t, 10)
	g := r.gated(t)
	in := r.instance(t, orders.WithLocker(g), orders.WithLockRule(orders.LockAlways))
	first := make(chan answer, 1)
	go func() { first <- post(t, in, "u1", "c-1", buy42) }()
	eventually(t, 10*time.Second, "the leader at the gate", func() bool { return g.arrived.Load() == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, in.srv.URL+"/orders", strings.NewReader(buy42))
		req.Header.Set("Authorization", "Bearer "+tokenFor(t, "u2"))
		req.Header.Set("Idempotency-Key", "c-2")
		_, err := http.DefaultClient.Do(req)
		gone <- err
	}()
	eventually(t, 10*time.Second, "the second request queued", func() bool { return in.svc.Queued("42") == 1 })
	cancel()
	<-gone
	eventually(t, 10*time.Second, "the cancelled request left the queue", func() bool { return in.svc.Queued("42") == 0 })
	close(g.open)
	if a := <-first; a.Status != http.StatusCreated {
		t.Fatalf("leader: %d %s", a.Status, a.Body)
	}
	if _, err := r.st.Lookup(context.Background(), "u2", request.MustKey("c-2")); err == nil {
		t.Fatal("the cancelled request left an outcome")
	}
	if s := r.stock(t); s != 9 {
		t.Fatalf("stock %d, want 9", s)
	}
}

// A batch whose fence went stale before its transaction (another writer
// took a token) writes nothing; the leader takes a new lease and places
// the batch again.
func TestStaleFenceOnABatch(t *testing.T) {
	r := newRig(t, 10)
	g := r.gated(t)
	iss, err := fencing.NewIssuer(r.pool)
	if err != nil {
		t.Fatal(err)
	}
	g.hook = func(n int32, _ lease.Lease) {
		if n == 1 { // a writer outside the lock takes a token meanwhile
			if _, err := iss.Next(context.Background(), "stock:42"); err != nil {
				t.Error(err)
			}
		}
	}
	reg := prometheus.NewRegistry()
	m, err := orders.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	in := r.instance(t, orders.WithLocker(g), orders.WithLockRule(orders.LockAlways), orders.WithMetrics(m))
	close(g.open)
	if a := post(t, in, "u1", "s-1", buy42); a.Status != http.StatusCreated {
		t.Fatalf("%d %s", a.Status, a.Body)
	}
	if n := g.leases.Load(); n != 2 {
		t.Fatalf("%d leases, want 2: the stale one and its replacement", n)
	}
	if got := placeCount(t, reg, "stale_fence"); got != 1 {
		t.Fatalf("stale_fence %v, want 1", got)
	}
	if s := r.stock(t); s != 9 {
		t.Fatalf("stock %d, want 9", s)
	}
}

// Without the Redis claim (the fast path down), two requests with one key
// can land in one batch: the second gets the first one's answer.
func TestDuplicateKeyInABatch(t *testing.T) {
	r := newRig(t, 10)
	g := r.gated(t)
	in := r.bare(t, orders.WithLocker(g), orders.WithLockRule(orders.LockAlways))
	first := make(chan answer, 1)
	go func() { first <- post(t, in, "lead", "lead", buy42) }()
	eventually(t, 10*time.Second, "the leader at the gate", func() bool { return g.arrived.Load() == 1 })
	answers := make([]answer, 2)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() { answers[i] = post(t, in, "u1", "dup", buy42) })
	}
	eventually(t, 10*time.Second, "both queued", func() bool { return in.svc.Queued("42") == 2 })
	close(g.open)
	wg.Wait()
	<-first
	if answers[0].Status != http.StatusCreated || answers[1].Status != http.StatusCreated || answers[0].Body != answers[1].Body {
		t.Fatalf("answers %d %s / %d %s: want one order, the same body twice", answers[0].Status, answers[0].Body, answers[1].Status, answers[1].Body)
	}
	if n := r.orderCount(t, "idempotency_key = 'dup'"); n != 1 {
		t.Fatalf("%d orders for the key", n)
	}
}

// Once a transaction found the product sold out, the next requests get the
// saved out-of-stock answer without the lock; a cancel on this instance
// ends that at once, a restock elsewhere within the recheck bound.
func TestSoldOutFastPathAndRestock(t *testing.T) {
	r := newRig(t, 1)
	g := r.gated(t)
	close(g.open)
	const recheck = 300 * time.Millisecond
	a := r.instance(t, orders.WithLocker(g), orders.WithLockRule(orders.LockAlways), orders.WithSoldOutRecheck(time.Hour))
	b := r.instance(t, orders.WithSoldOutRecheck(recheck))
	bought := post(t, a, "u1", "so-1", buy42)
	if bought.Status != http.StatusCreated {
		t.Fatalf("%d %s", bought.Status, bought.Body)
	}
	if x := post(t, a, "u2", "so-2", buy42); x.Status != http.StatusConflict {
		t.Fatalf("sold out: %d %s", x.Status, x.Body)
	}
	leases := g.leases.Load()
	for i := range 5 {
		if x := post(t, a, "u3", fmt.Sprintf("so-fast-%d", i), buy42); x.Status != http.StatusConflict {
			t.Fatalf("fast path: %d %s", x.Status, x.Body)
		}
	}
	if g.leases.Load() != leases {
		t.Fatalf("the sold-out answers took %d leases, want none", g.leases.Load()-leases)
	}
	if out, err := r.st.Lookup(context.Background(), "u3", request.MustKey("so-fast-0")); err != nil || out.Kind != store.OutcomeOutOfStock {
		t.Fatalf("a fast answer is not saved: %+v, %v", out, err)
	}
	// b learns the product is sold out, then a's cancel restocks it.
	if x := post(t, b, "u4", "so-b1", buy42); x.Status != http.StatusConflict {
		t.Fatalf("b, sold out: %d %s", x.Status, x.Body)
	}
	id := bought.json(t)["orderId"].(string)
	if c := do(t, http.MethodPost, a.srv.URL+"/orders/"+id+"/cancel", tokenFor(t, "u1"), "", nil); c.Status != http.StatusOK {
		t.Fatalf("cancel: %d %s", c.Status, c.Body)
	}
	time.Sleep(recheck) // the bound b stated
	if x := post(t, b, "u5", "so-b2", buy42); x.Status != http.StatusCreated {
		t.Fatalf("b, after its recheck bound: %d %s, want the restocked unit", x.Status, x.Body)
	}
	// a's own cancel would have ended its report at once: restock again.
	id = post(t, b, "u5", "so-b2", buy42).json(t)["orderId"].(string)
	if c := do(t, http.MethodPost, b.srv.URL+"/orders/"+id+"/cancel", tokenFor(t, "u5"), "", nil); c.Status != http.StatusOK {
		t.Fatalf("cancel: %d %s", c.Status, c.Body)
	}
	if x := post(t, b, "u6", "so-b3", buy42); x.Status != http.StatusCreated {
		t.Fatalf("b, right after its own cancel: %d %s", x.Status, x.Body)
	}
}

// bare is an instance without the Redis claims: Postgres alone answers
// replays.
func (r *rig) bare(t *testing.T, opts ...orders.Option) *instance {
	t.Helper()
	st, err := store.New(r.pool)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := orders.New(st, opts...)
	if err != nil {
		t.Fatal(err)
	}
	v, err := auth.NewVerifier(secret)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc.Handler(v))
	t.Cleanup(srv.Close)
	return &instance{srv: srv, svc: svc}
}
