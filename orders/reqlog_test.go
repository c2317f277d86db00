package orders_test

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/fencing"
	"github.com/quorumlock/quorumlock/internal/syncbuf"
	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/orders"
	"github.com/quorumlock/quorumlock/quorum"
)

// syncBuffer is a log sink that is safe to read while handlers write.
type syncBuffer struct{ syncbuf.Buffer }

// lines returns the JSON log lines whose msg is msg.
func (b *syncBuffer) lines(t *testing.T, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", sc.Text(), err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// tokenLocker is the stock lock of the service, recording every token it
// hands out so that the test can look for them in the log.
type tokenLocker struct {
	*quorum.Locker
	mu     sync.Mutex
	tokens []string
}

func (r *tokenLocker) LockMulti(ctx context.Context, keys ...string) (lease.Lease, error) {
	le, err := r.Locker.LockMulti(ctx, keys...)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.tokens = append(r.tokens, le.Token())
	r.mu.Unlock()
	return le, nil
}

// The request log carries the lock key, the token's digest, the fence, the
// acquire time, the lease left at release, the unlock result and the
// idempotency outcome, and never a token.
func TestRequestLog(t *testing.T) {
	r := newRig(t, 10)
	issuer, err := fencing.NewReserver(r.pool)
	if err != nil {
		t.Fatal(err)
	}
	var clients []redis.UniversalClient
	for _, c := range bedtest.RedisClients(t, r.bed) {
		clients = append(clients, c)
	}
	ql, err := quorum.New(clients, quorum.WithTTL(5*time.Second), quorum.WithMaxWait(3*time.Second),
		quorum.WithNodeTimeout(time.Second), quorum.WithFencer(issuer))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ql.Close() })
	locker := &tokenLocker{Locker: ql}
	var logs syncBuffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	in := r.instance(t, orders.WithLocker(locker), orders.WithLockRule(orders.LockAlways), orders.WithLogger(log))

	if a := post(t, in, "u1", "log-1", buy42); a.Status != http.StatusCreated {
		t.Fatalf("first POST: %d %s", a.Status, a.Body)
	}
	if a := post(t, in, "u1", "log-1", buy42); a.Status != http.StatusCreated || a.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %v %s", a.Status, a.Header, a.Body)
	}
	if a := post(t, in, "u1", "log-2", `{"productId": "nope", "quantity": 1, "addressVersion": "v1"}`); a.Status != http.StatusNotFound && a.Status != http.StatusUnprocessableEntity {
		t.Fatalf("unknown product: %d %s", a.Status, a.Body)
	}

	lines := logs.lines(t, "order request")
	if len(lines) != 3 {
		t.Fatalf("%d request lines, want 3:\n%s", len(lines), logs.String())
	}
	first, again, unknown := lines[0], lines[1], lines[2]
	if len(locker.tokens) != 1 {
		t.Fatalf("%d leases taken, want 1", len(locker.tokens))
	}
	tok := locker.tokens[0]
	lock, _ := first["lock"].(map[string]any)
	checks := []struct {
		what      string
		got, want any
	}{
		{"first: idempotency", first["idempotency"], "CREATED"},
		{"first: result", first["result"], "created"},
		{"first: status", first["status"], 201.0},
		{"first: lock key", lock["key"], "stock:42"},
		{"first: token digest", lock["token"], lease.TokenDigest(tok)},
		{"first: unlock", lock["unlock"], "released"},
		{"replay: idempotency", again["idempotency"], "SUCCESS"},
		{"replay: replayed", again["replayed"], true},
		{"replay: no lock", again["lock"], nil},
		{"unknown product: result", unknown["result"], "unknown_product"},
		{"unknown product: no lock", unknown["lock"], nil},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.what, c.got, c.want)
		}
	}
	if f, _ := lock["fence"].(float64); f < 1 {
		t.Errorf("first: fence %v, want ≥ 1", lock["fence"])
	}
	// Durations are nanoseconds in slog's JSON: the acquire took some time,
	// and the lease had validity left at release.
	if d, _ := lock["acquire"].(float64); d <= 0 {
		t.Errorf("first: acquire %v, want > 0", lock["acquire"])
	}
	if d, _ := lock["remaining"].(float64); d <= 0 || d > float64(5*time.Second) {
		t.Errorf("first: remaining %v, want in (0, 5s]", lock["remaining"])
	}
	if strings.Contains(logs.String(), tok) {
		t.Fatalf("the lock token appears in the log:\n%s", logs.String())
	}
}

// When the lock quorum is lost, the line says that Postgres arbitrated,
// with the lock key and no token.
func TestRequestLogFallback(t *testing.T) {
	r := newRig(t, 10)
	issuer, err := fencing.NewReserver(r.pool)
	if err != nil {
		t.Fatal(err)
	}
	// Three masters that refuse every connection: the quorum is lost.
	var dead []redis.UniversalClient
	for range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		_ = ln.Close()
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
		t.Cleanup(func() { _ = c.Close() })
		dead = append(dead, c)
	}
	ql, err := quorum.New(dead, quorum.WithTTL(5*time.Second), quorum.WithMaxWait(time.Second),
		quorum.WithNodeTimeout(time.Second), quorum.WithFencer(issuer))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ql.Close() })
	var logs syncBuffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	in := r.instance(t, orders.WithLocker(ql), orders.WithLockRule(orders.LockAlways), orders.WithLogger(log))
	if a := post(t, in, "u1", "fb-1", buy42); a.Status != http.StatusCreated {
		t.Fatalf("POST: %d %s", a.Status, a.Body)
	}
	lines := logs.lines(t, "order request")
	if len(lines) != 1 {
		t.Fatalf("%d request lines, want 1:\n%s", len(lines), logs.String())
	}
	l := lines[0]
	lock, _ := l["lock"].(map[string]any)
	if l["fallback"] != "db" || l["result"] != "created" || lock["key"] != "stock:42" || lock["token"] != nil || lock["unlock"] != nil {
		t.Fatalf("fallback line: %v", l)
	}
}
