package orders_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/quorumlock/quorumlock/devtools/fakepay"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/orders/payment"
)

// TestBadInputWritesNothing: every malformed request gets a clear 4xx
// problem and leaves the stock, the orders and the Redis claims as they were.
func TestBadInputWritesNothing(t *testing.T) {
	r := newRig(t, 3)
	in := r.instance(t)
	good := tokenFor(t, "u1")
	expired, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "u1", "exp": time.Now().Add(-time.Hour).Unix()}).SignedString(secret)
	forged, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "u1", "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte("another-secret-of-enough-length!"))
	cases := []struct {
		name, token, key, body string
		status                 int
		mention                string
	}{
		{"malformed json", good, "b1", `{"productId": "42",`, 400, "JSON"},
		{"not an object", good, "b2", `[1,2]`, 400, ""},
		{"missing key", good, "", buy42, 400, "Idempotency-Key"},
		{"oversized key", good, strings.Repeat("k", 256), buy42, 400, "Idempotency-Key"},
		{"zero quantity", good, "b3", `{"productId": "42", "quantity": 0, "addressVersion": "v1"}`, 400, "quantity"},
		{"negative quantity", good, "b4", `{"productId": "42", "quantity": -1, "addressVersion": "v1"}`, 400, "quantity"},
		{"huge quantity", good, "b5", `{"productId": "42", "quantity": 100000000000, "addressVersion": "v1"}`, 400, "quantity"},
		{"fractional quantity", good, "b6", `{"productId": "42", "quantity": 1.5, "addressVersion": "v1"}`, 400, "quantity"},
		{"missing product", good, "b7", `{"quantity": 1, "addressVersion": "v1"}`, 400, "productId"},
		{"unknown product", good, "b8", `{"productId": "43", "quantity": 1, "addressVersion": "v1"}`, 422, "43"},
		{"body over 64 KiB", good, "b9", `{"productId": "42", "quantity": 1, "addressVersion": "v1", "pad": "` + strings.Repeat("x", 70<<10) + `"}`, 413, ""},
		{"no token", "", "b10", buy42, 401, ""},
		{"expired token", expired, "b11", buy42, 401, "expired"},
		{"forged token", forged, "b12", buy42, 401, ""},
		{"garbage token", "not.a.jwt", "b13", buy42, 401, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := do(t, http.MethodPost, in.srv.URL+"/orders", c.token, c.key, []byte(c.body))
			if a.Status != c.status || a.Header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("got %d %s %s, want %d problem", a.Status, a.Header.Get("Content-Type"), a.Body, c.status)
			}
			if !strings.Contains(a.Body, `"title"`) || !strings.Contains(a.Body, c.mention) {
				t.Fatalf("problem body does not explain (want %q): %s", c.mention, a.Body)
			}
		})
	}
	if s := r.stock(t); s != 3 {
		t.Fatalf("stock %d after bad input", s)
	}
	if n := r.orderCount(t, "true"); n != 0 {
		t.Fatalf("%d orders after bad input", n)
	}
	var fences int
	if err := r.pool.QueryRow(context.Background(), "SELECT count(*) FROM fence_counters").Scan(&fences); err != nil || fences != 0 {
		t.Fatalf("bad input created %d fence counters (%v)", fences, err)
	}
	for i, c := range bedtest.RedisClients(t, r.bed) {
		keys, err := c.Keys(context.Background(), "idem:*").Result()
		if err != nil || len(keys) != 0 {
			t.Fatalf("node %d holds idempotency records after bad input: %v %v", i, keys, err)
		}
	}
	// A validation error is not saved: the same key then succeeds.
	if a := post(t, in, "u1", "b8", buy42); a.Status != http.StatusCreated {
		t.Fatalf("retry after a validation error: %d %s", a.Status, a.Body)
	}
}

// TestStateMachine walks every transition through the HTTP API, including
// the forbidden ones, and the payment paths with the fake provider.
func TestStateMachine(t *testing.T) {
	r := newRig(t, 10)
	in := r.instance(t)
	tok := tokenFor(t, "u1")
	create := func(key string) string {
		a := post(t, in, "u1", key, buy42)
		if a.Status != http.StatusCreated {
			t.Fatalf("create: %d %s", a.Status, a.Body)
		}
		return fmt.Sprint(a.json(t)["orderId"])
	}
	act := func(id, verb string) answer {
		return do(t, http.MethodPost, in.srv.URL+"/orders/"+id+"/"+verb, tok, "", nil)
	}
	statusOf := func(a answer) string { return fmt.Sprint(a.json(t)["status"]) }

	// CREATED -> PAYING -> PAID; paying again is idempotent; PAID cannot be cancelled.
	paid := create("sm-1")
	if a := act(paid, "pay"); a.Status != 200 || statusOf(a) != "PAID" {
		t.Fatalf("pay: %d %s", a.Status, a.Body)
	}
	if a := act(paid, "pay"); a.Status != 200 || statusOf(a) != "PAID" {
		t.Fatalf("pay again: %d %s", a.Status, a.Body)
	}
	if in.provider.Charges(payment.RequestID(paid)) != 1 {
		t.Fatalf("charged %d times", in.provider.Charges(payment.RequestID(paid)))
	}
	if a := act(paid, "cancel"); a.Status != 409 || !strings.Contains(a.Body, "PAID") {
		t.Fatalf("cancel a PAID order: %d %s", a.Status, a.Body)
	}

	// CREATED -> PAYING -> PAYMENT_FAILED.
	failed := create("sm-2")
	in.provider.FailNext(payment.RequestID(failed))
	if a := act(failed, "pay"); a.Status != 200 || statusOf(a) != "PAYMENT_FAILED" {
		t.Fatalf("declined pay: %d %s", a.Status, a.Body)
	}
	// A declined order can be cancelled: its stock comes back, once.
	beforeCancel := r.stock(t)
	for range 2 {
		if a := act(failed, "cancel"); a.Status != 200 || statusOf(a) != "CANCELLED" {
			t.Fatalf("cancel a PAYMENT_FAILED order: %d %s", a.Status, a.Body)
		}
	}
	if s := r.stock(t); s != beforeCancel+1 {
		t.Fatalf("stock %d after cancelling a declined order, want %d", s, beforeCancel+1)
	}

	// The charge succeeds but its reply is lost: PAYING, then the
	// reconciler settles it with the same request id, never charging twice.
	lost := create("sm-3")
	in.provider.LoseReplyNext(payment.RequestID(lost))
	// The 202 says why the payment is still open, then and on a retry.
	payment202 := func(a answer) map[string]any {
		t.Helper()
		p, _ := a.json(t)["payment"].(map[string]any)
		if a.Status != 202 || statusOf(a) != "PAYING" || a.Header.Get("Retry-After") == "" || p["status"] != "PENDING" {
			t.Fatalf("pay with a lost reply: %d %s", a.Status, a.Body)
		}
		return p
	}
	if p := payment202(act(lost, "pay")); p["reason"] != payment.ReasonNoAnswer || p["paymentRequestId"] != payment.RequestID(lost) {
		t.Fatalf("first 202's payment: %v", p)
	}
	if p := payment202(act(lost, "pay")); p["reason"] != payment.ReasonNoAnswer {
		t.Fatalf("202 while PAYING: %v", p)
	}
	svc, err := payment.NewService(r.st, in.provider)
	if err != nil {
		t.Fatal(err)
	}
	// The reconciler waits until the attempt is older than the provider
	// call timeout: age it, as time would.
	if _, err := r.pool.Exec(context.Background(), `UPDATE payments SET updated_at = now() - interval '1 hour' WHERE status = 'PENDING'`); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Reconcile(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	get := do(t, http.MethodGet, in.srv.URL+"/orders/"+lost, tok, "", nil)
	if get.Status != 200 || statusOf(get) != "PAID" || in.provider.Charges(payment.RequestID(lost)) != 1 {
		t.Fatalf("after reconcile: %d %s, charges %d", get.Status, get.Body, in.provider.Charges(payment.RequestID(lost)))
	}

	// A charge the provider refuses as invalid ends PAYMENT_FAILED with
	// its reason, at once, not PAYING.
	rejected := create("sm-5")
	in.provider.Inject(payment.RequestID(rejected), fakepay.FaultReject, 1)
	a := act(rejected, "pay")
	p, _ := a.json(t)["payment"].(map[string]any)
	if a.Status != 200 || statusOf(a) != "PAYMENT_FAILED" || p["status"] != "FAILED" || !strings.Contains(fmt.Sprint(p["reason"]), "refused as invalid") {
		t.Fatalf("pay refused by the provider: %d %s", a.Status, a.Body)
	}
	if a := act(rejected, "cancel"); a.Status != 200 || statusOf(a) != "CANCELLED" {
		t.Fatalf("cancel a rejected order: %d %s", a.Status, a.Body)
	}

	// CREATED -> CANCELLED restocks once; a cancelled order is never revived.
	before := r.stock(t)
	cancelled := create("sm-4")
	if a := act(cancelled, "cancel"); a.Status != 200 || statusOf(a) != "CANCELLED" {
		t.Fatalf("cancel: %d %s", a.Status, a.Body)
	}
	if a := act(cancelled, "cancel"); a.Status != 200 || statusOf(a) != "CANCELLED" {
		t.Fatalf("cancel again: %d %s", a.Status, a.Body)
	}
	if s := r.stock(t); s != before {
		t.Fatalf("stock %d after cancel, want %d", s, before)
	}
	if a := act(cancelled, "pay"); a.Status != 409 {
		t.Fatalf("pay a CANCELLED order: %d %s", a.Status, a.Body)
	}
	// The create request's replay is byte-identical even after the state moved on.
	if a := post(t, in, "u1", "sm-4", buy42); a.Status != 201 || !strings.Contains(a.Body, `"status":"CREATED"`) {
		t.Fatalf("replay after cancel: %d %s", a.Status, a.Body)
	}

	// Another user's order is not found; an unknown id is not found.
	other := tokenFor(t, "mallory")
	if a := do(t, http.MethodGet, in.srv.URL+"/orders/"+paid, other, "", nil); a.Status != 404 {
		t.Fatalf("another user's order: %d %s", a.Status, a.Body)
	}
	if a := do(t, http.MethodPost, in.srv.URL+"/orders/"+paid+"/cancel", other, "", nil); a.Status != 404 {
		t.Fatalf("cancel another user's order: %d", a.Status)
	}
	if a := act("ord_nope", "pay"); a.Status != 404 {
		t.Fatalf("unknown order: %d", a.Status)
	}
	// The saved answer of a create request can be polled.
	if a := do(t, http.MethodGet, in.srv.URL+"/orders/requests?key=sm-1", tok, "", nil); a.Status != 201 || !strings.Contains(a.Body, paid) {
		t.Fatalf("poll: %d %s", a.Status, a.Body)
	}
	if a := do(t, http.MethodGet, in.srv.URL+"/orders/requests?key=never", tok, "", nil); a.Status != 404 {
		t.Fatalf("poll unknown: %d %s", a.Status, a.Body)
	}
}
