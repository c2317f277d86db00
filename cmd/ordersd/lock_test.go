package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/internal/syncbuf"
	"github.com/quorumlock/quorumlock/orders/auth"
	"github.com/quorumlock/quorumlock/quorum"
)

const testJWTSecret = "0123456789abcdef0123456789abcdef"

// bedEnv points the daemon's environment at bed (a fresh database) and
// seeds product 42 with stock units.
func bedEnv(t *testing.T, bed *testbed.Bed, stock int) {
	t.Helper()
	t.Setenv("ORDERS_DATABASE_URL", bedtest.NewDatabase(t, bed.Postgres))
	t.Setenv("ORDERS_REDIS_ADDRS", strings.Join(bed.RedisAddrs(), ","))
	t.Setenv("ORDERS_JWT_SECRET", testJWTSecret)
	t.Setenv("ORDERS_LISTEN", "127.0.0.1:0")
	t.Setenv("ORDERS_PAYMENT_URL", "http://127.0.0.1:9")
	t.Setenv("ORDERS_LOG_FORMAT", "json")
	var out strings.Builder
	if err := run(context.Background(), []string{"seed", "-product", "42", "-stock", fmt.Sprint(stock), "-price", "1999"}, &out, &out); err != nil {
		t.Fatal(err)
	}
}

// postOrder posts one unit of product 42 for u1 under key and returns the
// status and body.
func postOrder(t *testing.T, base, key string) (int, string) {
	t.Helper()
	tok, err := auth.Mint([]byte(testJWTSecret), "u1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/orders", strings.NewReader(`{"productId":42,"quantity":1,"addressVersion":"v1"}`))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, string(body)
}

// get returns the status and body of GET base+path.
func get(t *testing.T, base, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(base + path)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, string(body)
}

// TestServeLockOff: with ORDERS_LOCK=off the daemon takes orders without
// the quorum lock (no quorumlock_* series, no lock in the request log),
// Postgres still keeps the stock and the replays, and with Redis masters
// down it stays ready, degraded, and still takes orders.
func TestServeLockOff(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Redis: 3, Postgres: true})
	bedEnv(t, bed, 2)
	t.Setenv("ORDERS_LOCK", "off")
	var logs syncbuf.Buffer
	base, stopServe := startServeLog(t, &logs)
	stop := sync.OnceValue(stopServe) // once: a second call would wait for an end already taken
	defer func() { _ = stop() }()
	if code, body := get(t, base, "/readyz"); code != http.StatusOK || body != "ready\n" {
		t.Fatalf("/readyz: %d %q", code, body)
	}
	for i, want := range []int{http.StatusCreated, http.StatusCreated, http.StatusConflict} {
		if code, body := postOrder(t, base, fmt.Sprintf("k%d", i)); code != want {
			t.Fatalf("order %d: %d %s, want %d", i, code, body, want)
		}
	}
	if code, body := postOrder(t, base, "k0"); code != http.StatusCreated || !strings.Contains(body, "orderId") {
		t.Fatalf("replay of k0: %d %s", code, body)
	}
	_, metrics := get(t, base, "/metrics")
	if strings.Contains(metrics, "quorumlock_") {
		t.Errorf("with the lock off, /metrics has lock series:\n%s", grepLines(metrics, "quorumlock_"))
	}
	if !strings.Contains(metrics, `orders_place_total{outcome="created"} 2`) {
		t.Errorf("metrics lack two created orders:\n%s", grepLines(metrics, "orders_place_total"))
	}
	// Two of the three masters die: no majority, which the lock would
	// need; the idempotency records on them go to Postgres.
	for _, n := range bed.Redis[1:] {
		if err := n.Kill(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	code, body := get(t, base, "/readyz")
	if code != http.StatusOK || !strings.HasPrefix(body, "ready (degraded: 2 of 3 Redis masters do not answer") {
		t.Fatalf("/readyz with 2 of 3 masters down: %d %q", code, body)
	}
	if code, body := postOrder(t, base, "k0"); code != http.StatusCreated {
		t.Fatalf("replay of k0 with the masters down: %d %s", code, body)
	}
	if err := stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] == "order request" && m["lock"] != nil {
			t.Errorf("with the lock off, a request ran under a lock: %s", line)
		}
		if m["msg"] == "ordersd listening" && m["lock"] != "off" {
			t.Errorf("the start line does not say the lock is off: %s", line)
		}
	}
}

// TestReaperEndsSoldOut: with the lock on, a product Postgres found sold
// out is answered from that report (for an hour here), until the reaper
// expires an unpaid order of it and tells the service: the next order is
// placed at once.
func TestReaperEndsSoldOut(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Redis: 3, Postgres: true})
	for _, n := range bed.Redis {
		c := n.Admin()
		err := quorum.TrustNode(context.Background(), c)
		_ = c.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	bedEnv(t, bed, 1)
	t.Setenv("ORDERS_SOLDOUT_RECHECK", "1h")
	t.Setenv("ORDERS_ORDER_HOLD", "2s")
	t.Setenv("ORDERS_EXPIRE_INTERVAL", "100ms")
	var logs syncbuf.Buffer
	base, stopServe := startServeLog(t, &logs)
	stop := sync.OnceValue(stopServe) // once: a second call would wait for an end already taken
	defer func() { _ = stop() }()
	if code, body := postOrder(t, base, "first"); code != http.StatusCreated {
		t.Fatalf("first order: %d %s", code, body)
	}
	if code, body := postOrder(t, base, "second"); code != http.StatusConflict {
		t.Fatalf("second order of a sold-out product: %d %s", code, body)
	}
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		code, body := postOrder(t, base, fmt.Sprintf("after-%d", i))
		if code == http.StatusCreated {
			break
		}
		if code != http.StatusConflict || time.Now().After(deadline) {
			t.Fatalf("order %d after the expiry: %d %s\nlog:\n%s", i, code, body, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "unpaid order expired; stock returned") {
		t.Fatalf("placed before the reaper expired the first order:\n%s", logs.String())
	}
	if err := stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
