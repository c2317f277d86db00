package orders_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/orders"
	"github.com/quorumlock/quorumlock/orders/idem"
	"github.com/quorumlock/quorumlock/orders/problem"
	"github.com/quorumlock/quorumlock/orders/request"
)

// TestIdempotencyCodes: the seed's codes by default (202 while a request is
// in flight, 409 for a key reused with another payload), and the IETF
// draft's with CodesIETF (409 in flight, 422 reused), at every place the
// conflict is found: the Redis claim and, with no Redis record, Postgres.
// Neither answer is saved: the request's own answer still replays.
func TestIdempotencyCodes(t *testing.T) {
	r := newRig(t, 5)
	seed := r.instance(t)
	ietf := r.instance(t, orders.WithIdempotencyCodes(orders.CodesIETF))
	const buy2 = `{"productId": "42", "quantity": 2, "addressVersion": "v1", "couponId": null}`

	plantClaim(t, r, "u1001", "req-busy", buy42, time.Minute)
	a := post(t, seed, "u1001", "req-busy", buy42)
	if a.Status != http.StatusAccepted || a.Header.Get("Retry-After") == "" {
		t.Fatalf("seed, in flight: %d %v %s", a.Status, a.Header, a.Body)
	}
	a = post(t, ietf, "u1001", "req-busy", buy42)
	if a.Status != http.StatusConflict || a.json(t)["type"] != problem.TypeRequestInProgress ||
		a.Header.Get("Content-Type") != problem.ContentType || a.Header.Get("Retry-After") == "" ||
		a.Header.Get("Location") != "/orders/requests?key=req-busy" {
		t.Fatalf("ietf, in flight: %d %v %s", a.Status, a.Header, a.Body)
	}
	// The poll is not a retried request: it answers 202 with either set.
	p := do(t, http.MethodGet, ietf.srv.URL+"/orders/requests?key=req-busy", tokenFor(t, "u1001"), "", nil)
	if p.Status != http.StatusAccepted {
		t.Fatalf("ietf poll: %d %s", p.Status, p.Body)
	}

	first := post(t, seed, "u1001", "req-1", buy42)
	if first.Status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	reused := func(in *instance, want int, where string) {
		t.Helper()
		a := post(t, in, "u1001", "req-1", buy2)
		if a.Status != want || a.json(t)["type"] != problem.TypeFingerprintMismatch || a.Header.Get("Content-Type") != problem.ContentType {
			t.Fatalf("%s: key reused: %d %s, want %d", where, a.Status, a.Body, want)
		}
	}
	reused(seed, http.StatusConflict, "seed, Redis claim")
	reused(ietf, http.StatusUnprocessableEntity, "ietf, Redis claim")

	// Without the Redis record the conflict is found by Postgres.
	k, err := idem.NewKey("u1001", request.MustKey("req-1"))
	if err != nil {
		t.Fatal(err)
	}
	drop := func() {
		t.Helper()
		c := r.bed.Redis[seed.claims.NodeIndex(k)].Admin()
		defer c.Close()
		if err := c.Del(context.Background(), k.String()).Err(); err != nil {
			t.Fatalf("drop the record: %v", err)
		}
	}
	// (A refused attempt drops its own claim, so the record stays gone.)
	drop()
	reused(ietf, http.StatusUnprocessableEntity, "ietf, Postgres")
	drop()
	reused(seed, http.StatusConflict, "seed, Postgres")

	// The real answer still replays, byte for byte, on both.
	for _, in := range []*instance{seed, ietf} {
		a := post(t, in, "u1001", "req-1", buy42)
		if a.Status != http.StatusCreated || a.Body != first.Body || a.Header.Get(orders.HeaderReplayed) != "true" {
			t.Fatalf("replay: %d %s, first %s", a.Status, a.Body, first.Body)
		}
	}
	if n := r.orderCount(t, "true"); n != 1 {
		t.Fatalf("%d orders, want 1", n)
	}
	if _, err := orders.ParseCodes("rfc"); err == nil || !strings.Contains(err.Error(), "rfc") {
		t.Fatalf("ParseCodes(rfc): %v", err)
	}
}
