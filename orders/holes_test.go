package orders_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/orders"
	"github.com/quorumlock/quorumlock/orders/auth"
	"github.com/quorumlock/quorumlock/orders/idem"
	"github.com/quorumlock/quorumlock/orders/request"
)

// fenceFailingLocker wins the lock but cannot take its fence, as a
// quorum.Locker whose Fencer's database is down answers.
type fenceFailingLocker struct{ lease.Locker }

func (fenceFailingLocker) LockMulti(ctx context.Context, keys ...string) (lease.Lease, error) {
	return nil, fmt.Errorf("quorum: lock %q: fence: %w", keys, errors.New("fencing: next token: connection refused"))
}

// A fence the database could not issue is an outage of the database, not
// contention: the answer says so and the request is not counted as busy.
func TestFenceFailureIsNotBusy(t *testing.T) {
	r := newRig(t, 5)
	in := r.instance(t, orders.WithLocker(fenceFailingLocker{}), orders.WithLockRule(orders.LockAlways))
	a := post(t, in, "u1001", "ff-1", buy42)
	if a.Status != http.StatusServiceUnavailable || strings.Contains(a.Body, "busy") || !strings.Contains(a.Body, "database") {
		t.Fatalf("got %d %s, want a 503 that names the database", a.Status, a.Body)
	}
	if s := r.stock(t); s != 5 {
		t.Fatalf("stock %d", s)
	}
	// Contention is still busy.
	busy := r.instance(t, orders.WithLocker(notAcquiredLocker{}), orders.WithLockRule(orders.LockAlways))
	if a := post(t, busy, "u1001", "ff-2", buy42); a.Status != http.StatusServiceUnavailable || !strings.Contains(a.Body, "busy") {
		t.Fatalf("contention: %d %s", a.Status, a.Body)
	}
}

type notAcquiredLocker struct{ lease.Locker }

func (notAcquiredLocker) LockMulti(ctx context.Context, keys ...string) (lease.Lease, error) {
	return nil, fmt.Errorf("lock %q: %w", keys, lease.ErrNotAcquired)
}

// A body that cannot be read is a 400 whose detail names no socket
// address, and nothing is written.
func TestBodyReadFailureLeaksNothing(t *testing.T) {
	r := newRig(t, 5)
	in := r.instance(t)
	v, err := auth.NewVerifier(secret)
	if err != nil {
		t.Fatal(err)
	}
	h := in.svc.Handler(v)
	req := httptest.NewRequest(http.MethodPost, "/orders",
		iotest.ErrReader(errors.New("read tcp 10.1.2.3:8080->10.9.8.7:51234: connection reset by peer")))
	req.Header.Set("Authorization", "Bearer "+tokenFor(t, "u1001"))
	req.Header.Set("Idempotency-Key", "br-1")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusBadRequest || strings.Contains(rec.Body.String(), "10.") || !strings.Contains(rec.Body.String(), "could not be read") {
		t.Fatalf("got %d %s", rec.Code, rec.Body.String())
	}
	if s := r.stock(t); s != 5 {
		t.Fatalf("stock %d", s)
	}
}

// A replay takes its Content-Type from the saved status, never from what
// the Redis record says: a record altered in Redis cannot make the API
// answer another media type.
func TestReplayContentTypeFollowsTheStatus(t *testing.T) {
	r := newRig(t, 5)
	in := r.instance(t)
	first := post(t, in, "u1001", "ct-1", buy42)
	if first.Status != http.StatusCreated {
		t.Fatalf("%d %s", first.Status, first.Body)
	}
	k, err := idem.NewKey("u1001", request.MustKey("ct-1"))
	if err != nil {
		t.Fatal(err)
	}
	node := r.bed.Redis[in.claims.NodeIndex(k)].Admin()
	defer node.Close()
	if err := node.HSet(context.Background(), k.String(), "content_type", "text/html; charset=utf-8").Err(); err != nil {
		t.Fatal(err)
	}
	again := post(t, in, "u1001", "ct-1", buy42)
	if again.Status != http.StatusCreated || again.Header.Get("Content-Type") != "application/json" || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %q %q", again.Status, again.Header.Get("Content-Type"), again.Header.Get("Idempotent-Replayed"))
	}
	// Both answers point at the order they created.
	id := first.json(t)["orderId"].(string)
	for _, a := range []answer{first, again} {
		if got := a.Header.Get("Location"); got != "/orders/"+id {
			t.Fatalf("Location %q, want /orders/%s", got, id)
		}
	}
}
