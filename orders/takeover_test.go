package orders_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/orders"
	"github.com/quorumlock/quorumlock/orders/idem"
	"github.com/quorumlock/quorumlock/orders/request"
	"github.com/quorumlock/quorumlock/orders/store"
)

// plantClaim leaves an IN_PROGRESS record as an attempt that crashed would:
// claimed with the given processing lease and never completed.
func plantClaim(t *testing.T, r *rig, user, key, body string, lease time.Duration) {
	t.Helper()
	var clients []redis.UniversalClient
	for _, c := range bedtest.RedisClients(t, r.bed) {
		clients = append(clients, c)
	}
	crashed, err := idem.New(clients, idem.WithLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	o, err := request.ParseBytes([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	k, _ := idem.NewKey(user, request.MustKey(key))
	res, err := crashed.Claim(context.Background(), k, o.Fingerprint(), idem.NewOwner())
	if err != nil || res.Outcome != idem.Created {
		t.Fatalf("plant: %+v %v", res, err)
	}
}

// expireClaim moves the processing lease of (user, key) into the past on
// the clock of the node that holds its record, as if the lease had run out.
func expireClaim(t *testing.T, r *rig, claims *idem.Store, user, key string) {
	t.Helper()
	k, err := idem.NewKey(user, request.MustKey(key))
	if err != nil {
		t.Fatal(err)
	}
	c := r.bed.Redis[claims.NodeIndex(k)].Admin()
	defer c.Close()
	ctx := context.Background()
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	past := strconv.FormatInt(now.UnixMilli()-1, 10)
	if err := c.HSet(ctx, k.String(), "lease_until", past).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestInProgressThenTakeoverWithoutSideEffect: a crash after the claim and
// before the lock. Inside the processing lease a retry gets 202 with
// Retry-After and Location; after it, Postgres shows no order and the
// retry proceeds.
func TestInProgressThenTakeoverWithoutSideEffect(t *testing.T) {
	r := newRig(t, 1)
	in := r.instance(t)
	plantClaim(t, r, "u1001", "req-crash", buy42, 30*time.Second)
	a := post(t, in, "u1001", "req-crash", buy42)
	if a.Status != http.StatusAccepted || a.Header.Get("Retry-After") == "" || a.Header.Get("Location") != "/orders/requests?key=req-crash" {
		t.Fatalf("inside the lease: %d %v %s", a.Status, a.Header, a.Body)
	}
	if n := r.orderCount(t, "true"); n != 0 {
		t.Fatalf("%d orders while the claim was in progress", n)
	}
	expireClaim(t, r, in.claims, "u1001", "req-crash")
	a = post(t, in, "u1001", "req-crash", buy42)
	if a.Status != http.StatusCreated {
		t.Fatalf("after the lease: %d %s", a.Status, a.Body)
	}
	if n := r.orderCount(t, "true"); n != 1 {
		t.Fatalf("%d orders", n)
	}
}

// TestTakeoverRepairsFromPostgres: a crash after the commit and before the
// SUCCESS record. The retry after the lease finds the order in Postgres,
// repairs Redis and replays the saved snapshot; no second order.
func TestTakeoverRepairsFromPostgres(t *testing.T) {
	r := newRig(t, 5)
	in := r.instance(t)
	placed := crashAfterCommit(t, r, "u1001", "req-late")
	a := post(t, in, "u1001", "req-late", buy42)
	if a.Status != placed.ResponseStatus || a.Body != string(placed.ResponseBody) || a.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("takeover replay: %d %s, saved %d %s", a.Status, a.Body, placed.ResponseStatus, placed.ResponseBody)
	}
	k, _ := idem.NewKey("u1001", request.MustKey("req-late"))
	rec, err := in.claims.Get(context.Background(), k)
	if err != nil || rec.State != idem.StateSuccess || !strings.Contains(string(rec.Response.Body), placed.Order.ID) {
		t.Fatalf("record not repaired: %+v %v", rec, err)
	}
	if n := r.orderCount(t, "true"); n != 1 {
		t.Fatalf("%d orders", n)
	}
	if s := r.stock(t); s != 4 {
		t.Fatalf("stock %d, want 4", s)
	}
}

// TestPollAfterCrashAfterCommit: the attempt committed and died before
// SUCCESS reached Redis. Polling the Location asks Postgres once the lease
// is over, replays the saved answer and repairs Redis.
func TestPollAfterCrashAfterCommit(t *testing.T) {
	r := newRig(t, 5)
	in := r.instance(t)
	placed := crashAfterCommit(t, r, "u1001", "req-poll")
	a := do(t, http.MethodGet, in.srv.URL+"/orders/requests?key=req-poll", tokenFor(t, "u1001"), "", nil)
	if a.Status != placed.ResponseStatus || a.Body != string(placed.ResponseBody) {
		t.Fatalf("poll: %d %s", a.Status, a.Body)
	}
	k, _ := idem.NewKey("u1001", request.MustKey("req-poll"))
	if rec, err := in.claims.Get(context.Background(), k); err != nil || rec.State != idem.StateSuccess {
		t.Fatalf("record not repaired: %+v %v", rec, err)
	}
	// A key with no attempt at all, and one like "..", which path
	// cleaning would have eaten.
	for _, key := range []string{"never-sent", ".."} {
		if a := do(t, http.MethodGet, in.srv.URL+"/orders/requests?key="+key, tokenFor(t, "u1001"), "", nil); a.Status != http.StatusNotFound {
			t.Fatalf("poll %q: %d %s", key, a.Status, a.Body)
		}
	}
}

// crashAfterCommit leaves what an attempt that committed its order and died
// before marking the claim SUCCESS leaves: the order in Postgres and an
// IN_PROGRESS claim whose processing lease has run out.
func crashAfterCommit(t *testing.T, r *rig, user, key string) store.Outcome {
	t.Helper()
	o, _ := request.ParseBytes([]byte(buy42))
	id := orders.NewOrderID(t)
	res, err := r.st.PlaceCarts(context.Background(), []store.Cart{{
		Order: store.OrderRequest{UserID: user, IdempotencyKey: request.MustKey(key), Fingerprint: o.Fingerprint(), Quantity: 1, OrderID: id},
		Lines: []store.CartLine{{ProductID: "42", Quantity: 1, Fence: 1}},
		Snapshot: func(out store.Outcome) store.Snapshot {
			if out.Kind == store.OutcomeOrder {
				return orders.Created(id, o)
			}
			return orders.OutOfStock(o)
		},
	}})
	if err == nil {
		err = res[0].Err
	}
	var placed store.Outcome
	if len(res) > 0 {
		placed = res[0].Outcome
	}
	if err != nil {
		t.Fatal(err)
	}
	plantClaim(t, r, user, key, buy42, 100*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	return placed
}
