package orders_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/devtools/audit"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/orders"
	"github.com/quorumlock/quorumlock/orders/idem"
	"github.com/quorumlock/quorumlock/orders/request"
	"github.com/quorumlock/quorumlock/quorum"
)

// TestSeedScenario: the user clicks "buy" twice and the gateway retries
// once; three identical requests for the last unit reach three instances.
// Exactly one order, stock 0, and the same answer for all three.
func TestSeedScenario(t *testing.T) {
	r := newRig(t, 1)
	ins := []*instance{r.instance(t), r.instance(t), r.instance(t)}
	answers := make([]answer, 3)
	var wg sync.WaitGroup
	for i, in := range ins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = post(t, in, "u1001", "req-001", buy42)
		}()
	}
	wg.Wait()
	// Requests still in progress (202) send the same request again until
	// they have the answer.
	for i, a := range answers {
		answers[i] = untilFinal(a, func() answer { return post(t, ins[i], "u1001", "req-001", buy42) })
	}
	var resps []audit.Response
	for i, a := range answers {
		t.Logf("instance %d: %d %s replayed=%q", i, a.Status, a.Body, a.Header.Get(orders.HeaderReplayed))
		if a.Status != http.StatusCreated {
			t.Fatalf("instance %d answered %d %s", i, a.Status, a.Body)
		}
		resps = append(resps, audit.Response{UserID: "u1001", IdempotencyKey: "req-001", Status: a.Status, Body: a.Body,
			OrderID: fmt.Sprint(a.json(t)["orderId"])})
	}
	verdict := audit.Orders(map[string]audit.Stock{"42": {Initial: 1, Final: r.stock(t)}}, r.rows(t), resps)
	if !verdict.OK() {
		t.Fatal(verdict)
	}
	if n := r.orderCount(t, "true"); n != 1 {
		t.Fatalf("%d orders, want 1", n)
	}
	if s := r.stock(t); s != 0 {
		t.Fatalf("stock %d, want 0", s)
	}
	replayed := 0
	for _, a := range answers {
		if a.Header.Get(orders.HeaderReplayed) == "true" {
			replayed++
		}
	}
	if replayed != 2 {
		t.Fatalf("%d answers marked replayed, want 2", replayed)
	}
}

// finalWithin bounds how long a client waits for a request in progress to
// end: well above the rig's processing lease, after which a retry takes the
// request over.
const finalWithin = 30 * time.Second

// untilFinal does what a 202 asks of a client: while the answer is 202, it
// waits the answer's Retry-After (a short poll interval without one) and
// asks again with next, for at most finalWithin in all. It returns the last
// answer.
func untilFinal(a answer, next func() answer) answer {
	deadline := time.Now().Add(finalWithin)
	for a.Status == http.StatusAccepted {
		left := time.Until(deadline)
		if left <= 0 {
			return a
		}
		wait, ok := retryAfter(a)
		if !ok {
			wait = 100 * time.Millisecond
		}
		time.Sleep(min(wait, left))
		a = next()
	}
	return a
}

// rows reads the orders table for the checker.
func (r *rig) rows(t *testing.T) []audit.OrderRow {
	t.Helper()
	rows, err := r.pool.Query(context.Background(), "SELECT order_id, user_id, idempotency_key, product_id, quantity, status FROM orders")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []audit.OrderRow
	for rows.Next() {
		var o audit.OrderRow
		if err := rows.Scan(&o.OrderID, &o.UserID, &o.IdempotencyKey, &o.ProductID, &o.Quantity, &o.Status); err != nil {
			t.Fatal(err)
		}
		out = append(out, o)
	}
	return out
}

// TestHundredConcurrentIdenticalRequests: one order, one decrement, every
// final answer identical.
func TestHundredConcurrentIdenticalRequests(t *testing.T) {
	r := newRig(t, 5)
	ins := []*instance{r.instance(t), r.instance(t), r.instance(t)}
	answers := make([]answer, 100)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = post(t, ins[i%3], "u1001", "req-100", buy42)
		}()
	}
	wg.Wait()
	var resps []audit.Response
	codes := map[int]int{}
	for _, a := range answers {
		codes[a.Status]++
		resp := audit.Response{UserID: "u1001", IdempotencyKey: "req-100", Status: a.Status, Body: a.Body}
		if a.Status == http.StatusCreated {
			resp.OrderID = fmt.Sprint(a.json(t)["orderId"])
		} else if a.Status != http.StatusAccepted {
			t.Fatalf("unexpected answer %d %s", a.Status, a.Body)
		}
		resps = append(resps, resp)
	}
	t.Logf("first answers: %s", audit.Summary(resps))
	// Every request that got 202 polls its Location until it has the
	// final answer, which must be the same for all.
	for i, a := range answers {
		if a.Status != http.StatusAccepted {
			continue
		}
		loc := a.Header.Get("Location")
		poll := func() answer { return do(t, http.MethodGet, ins[i%3].srv.URL+loc, tokenFor(t, "u1001"), "", nil) }
		final := untilFinal(poll(), poll)
		if final.Status != http.StatusCreated {
			t.Fatalf("poll %s: %d %s", loc, final.Status, final.Body)
		}
		resps = append(resps, audit.Response{UserID: "u1001", IdempotencyKey: "req-100", Status: final.Status, Body: final.Body,
			OrderID: fmt.Sprint(final.json(t)["orderId"])})
	}
	if codes[http.StatusCreated] == 0 {
		t.Fatal("no request got the order")
	}
	v := audit.Orders(map[string]audit.Stock{"42": {Initial: 5, Final: r.stock(t)}}, r.rows(t), resps)
	if !v.OK() {
		t.Fatal(v)
	}
	if n := r.orderCount(t, "true"); n != 1 {
		t.Fatalf("%d orders, want 1", n)
	}
}

func TestChangedParametersUnderSameKeyAreRefused(t *testing.T) {
	r := newRig(t, 10)
	reg := prometheus.NewRegistry()
	m, err := orders.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	in := r.instance(t, orders.WithMetrics(m))
	if a := post(t, in, "u1001", "req-7", buy42); a.Status != http.StatusCreated {
		t.Fatalf("first: %d %s", a.Status, a.Body)
	}
	if a := post(t, in, "u1001", "req-7", buy42); a.Status != http.StatusCreated || a.Header.Get(orders.HeaderReplayed) != "true" {
		t.Fatalf("replay: %d %s", a.Status, a.Body)
	}
	for _, body := range []string{
		`{"productId": "42", "quantity": 2, "addressVersion": "v1"}`,
		`{"productId": "42", "quantity": 1, "addressVersion": "v2"}`,
		`{"productId": "42", "quantity": 1, "addressVersion": "v1", "couponId": "C1"}`,
	} {
		for i := 0; i < 2; i++ {
			a := post(t, in, "u1001", "req-7", body)
			if a.Status != http.StatusConflict || a.Header.Get("Content-Type") != "application/problem+json" ||
				!strings.Contains(a.Body, "fingerprint") {
				t.Fatalf("%s: %d %s %s", body, a.Status, a.Header.Get("Content-Type"), a.Body)
			}
		}
	}
	// The same key, after its Redis record is gone: Postgres still refuses.
	k, _ := idem.NewKey("u1001", request.MustKey("req-7"))
	c := bedtest.RedisClients(t, r.bed)
	for _, cl := range c {
		_ = cl.Del(context.Background(), k.String()).Err()
	}
	if a := post(t, in, "u1001", "req-7", `{"productId": "42", "quantity": 3, "addressVersion": "v1"}`); a.Status != http.StatusConflict {
		t.Fatalf("after the Redis record was deleted: %d %s", a.Status, a.Body)
	}
	if n := r.orderCount(t, "true"); n != 1 {
		t.Fatalf("%d orders", n)
	}
	if s := r.stock(t); s != 9 {
		t.Fatalf("stock %d, want 9", s)
	}
	// orders_place_total counts every answer by what decided it, whether
	// the Redis record (the replay, six refusals) or Postgres (the last).
	for outcome, want := range map[string]float64{"created": 1, "replayed": 1, "fingerprint_mismatch": 7} {
		if got := placeCount(t, reg, outcome); got != want {
			t.Errorf("orders_place_total{outcome=%q} = %v, want %v", outcome, got, want)
		}
	}
}

func TestSameKeyForTwoUsersGivesTwoOrders(t *testing.T) {
	r := newRig(t, 10)
	in := r.instance(t)
	a := post(t, in, "alice", "shared-key", buy42)
	b := post(t, in, "bob", "shared-key", buy42)
	if a.Status != http.StatusCreated || b.Status != http.StatusCreated {
		t.Fatalf("alice %d, bob %d", a.Status, b.Status)
	}
	if a.json(t)["orderId"] == b.json(t)["orderId"] {
		t.Fatal("two users got the same order")
	}
	if n := r.orderCount(t, "idempotency_key = 'shared-key'"); n != 2 {
		t.Fatalf("%d orders, want 2", n)
	}
}

// TestReplayAfterRedisRecordDeleted: Postgres answers the replay, byte for
// byte, and the Redis record is repaired.
func TestReplayAfterRedisRecordDeleted(t *testing.T) {
	r := newRig(t, 10)
	in := r.instance(t)
	first := post(t, in, "u1001", "req-9", buy42)
	if first.Status != http.StatusCreated {
		t.Fatalf("%d %s", first.Status, first.Body)
	}
	k, _ := idem.NewKey("u1001", request.MustKey("req-9"))
	for _, c := range bedtest.RedisClients(t, r.bed) {
		if err := c.Del(context.Background(), k.String()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	again := post(t, in, "u1001", "req-9", buy42)
	if again.Status != first.Status || again.Body != first.Body || again.Header.Get(orders.HeaderReplayed) != "true" {
		t.Fatalf("replay from Postgres: %d %q, first %d %q", again.Status, again.Body, first.Status, first.Body)
	}
	rec, err := in.claims.Get(context.Background(), k)
	if err != nil || rec.State != idem.StateSuccess {
		t.Fatalf("Redis record not repaired: %+v %v", rec, err)
	}
	if n := r.orderCount(t, "true"); n != 1 {
		t.Fatalf("%d orders", n)
	}
}

// TestOutOfStockIsSavedAndReplayed: the rejection is final and replays
// like a success.
func TestOutOfStockIsSavedAndReplayed(t *testing.T) {
	r := newRig(t, 1)
	in := r.instance(t)
	if a := post(t, in, "alice", "k1", buy42); a.Status != http.StatusCreated {
		t.Fatalf("%d %s", a.Status, a.Body)
	}
	no := post(t, in, "bob", "k1", buy42)
	if no.Status != http.StatusConflict || !strings.Contains(no.Body, "out-of-stock") {
		t.Fatalf("bob: %d %s", no.Status, no.Body)
	}
	// Restock: bob's key keeps its saved answer.
	if err := r.st.SeedProduct(context.Background(), "42", 5, 1999); err != nil {
		t.Fatal(err)
	}
	again := post(t, in, "bob", "k1", buy42)
	if again.Status != no.Status || again.Body != no.Body || again.Header.Get(orders.HeaderReplayed) != "true" {
		t.Fatalf("replay: %d %s", again.Status, again.Body)
	}
}

// TestQuorumLoss partitions three of five masters, every batch taking the
// lock (LockAlways: a quiet product's order takes none). With the db fallback,
// Postgres arbitrates alone and the last unit is sold once (clients retry a
// 503 as it asks, and the final answers are judged); with reject, the
// service answers every request 503 with Retry-After and writes nothing.
func TestQuorumLoss(t *testing.T) {
	for _, mode := range []orders.Fallback{orders.FallbackDB, orders.FallbackReject} {
		t.Run(string(mode), func(t *testing.T) {
			r := newRig(t, 1)
			ctx := context.Background()
			ins := []*instance{r.instance(t, orders.WithFallback(mode), orders.WithLockRule(orders.LockAlways)), r.instance(t, orders.WithFallback(mode), orders.WithLockRule(orders.LockAlways))}
			for _, n := range r.bed.Redis[:3] {
				if err := n.Partition(ctx); err != nil {
					t.Fatal(err)
				}
			}
			answers := make([]answer, 6)
			retries := make([]int, 6)
			var wg sync.WaitGroup
			for i := range answers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					user := fmt.Sprintf("user%d", i)
					if mode == orders.FallbackReject {
						// Every answer is judged as it comes: no retry.
						answers[i] = post(t, ins[i%2], user, "k", buy42)
						return
					}
					// Postgres arbitrating alone may answer 503 (the fence
					// went stale more often than the service retries, or
					// the request ran out of time); the client retries.
					answers[i], retries[i] = postRetrying(t, ins[i%2], user, "k", buy42, 10)
				}()
			}
			wg.Wait()
			for _, n := range r.bed.Redis[:3] {
				_ = n.Heal(ctx)
			}
			codes := map[int]int{}
			for _, a := range answers {
				codes[a.Status]++
			}
			retried := 0
			for _, n := range retries {
				retried += n
			}
			t.Logf("%s: answers %v, 503 answers retried: %d", mode, codes, retried)
			switch mode {
			case orders.FallbackDB:
				if codes[http.StatusCreated] != 1 || codes[http.StatusConflict] != 5 {
					t.Fatalf("want one 201 and five 409, got %v", codes)
				}
				if s := r.stock(t); s != 0 {
					t.Fatalf("stock %d", s)
				}
			case orders.FallbackReject:
				for _, a := range answers {
					if a.Status != http.StatusServiceUnavailable || a.Header.Get("Retry-After") == "" {
						t.Fatalf("want 503 with Retry-After, got %d %v %s", a.Status, a.Header, a.Body)
					}
				}
				if s := r.stock(t); s != 1 {
					t.Fatalf("stock %d after rejections", s)
				}
				if n := r.orderCount(t, "true"); n != 0 {
					t.Fatalf("%d orders after rejections", n)
				}
				// After the quorum is back, the same keys go through.
				if a := post(t, ins[0], "user0", "k", buy42); a.Status != http.StatusCreated {
					t.Fatalf("after heal: %d %s", a.Status, a.Body)
				}
			}
			v := audit.Orders(map[string]audit.Stock{"42": {Initial: 1, Final: r.stock(t)}}, r.rows(t), nil)
			if !v.OK() {
				t.Fatal(v)
			}
		})
	}
}

// TestDistinctUsersNeverOversell: 30 users race for 10 units through three
// instances: exactly 10 orders, 20 saved out-of-stock answers, stock 0.
// The 30 critical sections are serial on one stock lock, so on a loaded
// machine a request can outwait the service's lock wait (503 busy), or lose
// its lease to a request that went to Postgres when slow nodes made the
// quorum look lost (503, the stock changed hands). The clients then do what
// a 503 asks (wait Retry-After, send the same request again), and the final
// answers are what the test judges.
func TestDistinctUsersNeverOversell(t *testing.T) {
	r := newRig(t, 10)
	ins := []*instance{r.instance(t), r.instance(t), r.instance(t)}
	answers := make([]answer, 30)
	retries := make([]int, 30)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i], retries[i] = postRetrying(t, ins[i%3], fmt.Sprintf("user%02d", i), "buy-1", buy42, 10)
		}()
	}
	wg.Wait()
	retried := 0
	for _, n := range retries {
		retried += n
	}
	t.Logf("503 answers retried: %d", retried)
	var resps []audit.Response
	codes := map[int]int{}
	for i, a := range answers {
		codes[a.Status]++
		resp := audit.Response{UserID: fmt.Sprintf("user%02d", i), IdempotencyKey: "buy-1", Status: a.Status, Body: a.Body}
		if a.Status == http.StatusCreated {
			resp.OrderID = fmt.Sprint(a.json(t)["orderId"])
		}
		resps = append(resps, resp)
	}
	t.Logf("answers: %v", codes)
	if codes[http.StatusCreated] != 10 || codes[http.StatusConflict] != 20 {
		t.Fatalf("want 10 x 201 and 20 x 409, got %v", codes)
	}
	v := audit.Orders(map[string]audit.Stock{"42": {Initial: 10, Final: r.stock(t)}}, r.rows(t), resps)
	if !v.OK() || r.stock(t) != 0 {
		t.Fatalf("stock %d; %v", r.stock(t), v)
	}
}

// TestBusyLockIsNotAnOutage: another holder keeps the stock lock past the
// service's lock wait (every batch taking the lock: LockAlways). That is contention, not a lost quorum: in both
// fallback modes the service answers 503 busy, writes nothing, and does not
// go around the lock; after the holder releases, the same key goes through.
func TestBusyLockIsNotAnOutage(t *testing.T) {
	for _, mode := range []orders.Fallback{orders.FallbackDB, orders.FallbackReject} {
		t.Run(string(mode), func(t *testing.T) {
			r := newRig(t, 1)
			in := r.instance(t, orders.WithFallback(mode), orders.WithLockRule(orders.LockAlways))
			var clients []redis.UniversalClient
			for _, c := range bedtest.RedisClients(t, r.bed) {
				clients = append(clients, c)
			}
			// The holder's nodes get a long timeout: a node that answers
			// late under load must not leave the lock off it.
			other, err := quorum.New(clients, quorum.WithTTL(30*time.Second), quorum.WithNodeTimeout(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = other.Close() })
			held, err := other.Lock(context.Background(), "stock:42")
			if err != nil {
				t.Fatal(err)
			}
			// Lock returns once a majority granted it; wait until every
			// node holds the token, so the service finds it held on all.
			r.awaitHeldEverywhere(t, held.Key(), held.Token())
			a := post(t, in, "u1", "k", buy42)
			if a.Status != http.StatusServiceUnavailable || !strings.Contains(a.Body, "busy") || a.Header.Get("Retry-After") == "" {
				t.Fatalf("with the lock held elsewhere: %d %s", a.Status, a.Body)
			}
			if n := r.orderCount(t, "true"); n != 0 {
				t.Fatalf("%d orders went around the held lock", n)
			}
			unlock(t, held)
			if a := post(t, in, "u1", "k", buy42); a.Status != http.StatusCreated {
				t.Fatalf("after release: %d %s", a.Status, a.Body)
			}
		})
	}
}

// awaitHeldEverywhere waits, bounded, until every node of the bed holds
// token under key.
func (r *rig) awaitHeldEverywhere(t *testing.T, key, token string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for i, n := range r.bed.Redis {
		c := n.Admin()
		for {
			v, err := c.Get(ctx, key).Result()
			if err == nil && v == token {
				break
			}
			if time.Now().After(deadline) {
				_ = c.Close()
				t.Fatalf("node %d: %s = %q (%v), want the holder's token %q", i, key, v, err, token)
			}
			time.Sleep(20 * time.Millisecond)
		}
		_ = c.Close()
	}
}

// unlock releases l, calling Unlock again (which retries the nodes that did
// not confirm) while the release is unconfirmed, a bounded number of times.
func unlock(t *testing.T, l lease.Lease) {
	t.Helper()
	var err error
	for range 5 {
		if err = l.Unlock(context.Background()); !errors.Is(err, lease.ErrUnlockUnconfirmed) {
			break
		}
		t.Logf("unlock: %v; again", err)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// With the lock quorum lost, writers that Postgres arbitrates alone take
// their fence inside the order transaction, once they hold the stock row:
// concurrent buyers of one product on three instances never make each
// other's fences stale, so none of them gets a 503 for it.
func TestFallbackWritersDoNotStarve(t *testing.T) {
	const buyers = 24
	r := newRig(t, buyers)
	ctx := context.Background()
	var ins []*instance
	reg := prometheus.NewRegistry()
	m, err := orders.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		ins = append(ins, r.instance(t, orders.WithFallback(orders.FallbackDB), orders.WithMetrics(m)))
	}
	for _, n := range r.bed.Redis[:3] {
		if err := n.Partition(ctx); err != nil {
			t.Fatal(err)
		}
	}
	answers := make([]answer, buyers)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() { answers[i] = post(t, ins[i%3], fmt.Sprintf("buyer%d", i), "k", buy42) })
	}
	wg.Wait()
	for _, n := range r.bed.Redis[:3] {
		_ = n.Heal(ctx)
	}
	codes := map[int]int{}
	for _, a := range answers {
		codes[a.Status]++
	}
	stale := placeCount(t, reg, "stale_fence")
	t.Logf("first answers of %d concurrent buyers on 3 instances, quorum lost: %v; stale fences retried inside the service: %v", buyers, codes, stale)
	if stale != 0 {
		t.Errorf("%v stale fences among writers that Postgres arbitrates alone", stale)
	}
	if codes[http.StatusCreated] != buyers {
		for _, a := range answers {
			if a.Status != http.StatusCreated {
				t.Errorf("%d %s", a.Status, a.Body)
			}
		}
		t.Fatalf("answers %v, want %d x 201", codes, buyers)
	}
	if s := r.stock(t); s != 0 {
		t.Fatalf("stock %d, want 0", s)
	}
}

// placeCount reads orders_place_total{outcome} from reg.
func placeCount(t *testing.T, reg *prometheus.Registry, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "orders_place_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
