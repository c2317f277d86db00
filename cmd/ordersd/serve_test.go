package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/devtools/fakepay"
	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/internal/syncbuf"
	"github.com/quorumlock/quorumlock/orders/auth"
	"github.com/quorumlock/quorumlock/orders/payment"
	"github.com/quorumlock/quorumlock/quorum"
)

// TestServe runs the daemon on the bed: probes, metrics, one order, and a
// graceful shutdown when its context ends.
func TestServe(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Redis: 3, Postgres: true})
	ctx := context.Background()
	for _, n := range bed.Redis {
		c := n.Admin()
		err := quorum.TrustNode(ctx, c)
		_ = c.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	dsn := bedtest.NewDatabase(t, bed.Postgres)
	t.Setenv("ORDERS_DATABASE_URL", dsn)
	t.Setenv("ORDERS_REDIS_ADDRS", strings.Join(bed.RedisAddrs(), ","))
	t.Setenv("ORDERS_JWT_SECRET", "0123456789abcdef0123456789abcdef")
	t.Setenv("ORDERS_LISTEN", "127.0.0.1:0")
	t.Setenv("ORDERS_LOCK", "on") // every order under the lock: its lease in the request log
	// On a loaded machine the first acquisition (new connections, the
	// scripts loaded) can outlast the default waits; the order would then
	// be placed by Postgres alone, with no lease to log.
	t.Setenv("ORDERS_LOCK_WAIT", "5s")
	t.Setenv("ORDERS_NODE_TIMEOUT", "1s")
	// The payment provider, calling back the daemon once it listens.
	const cbSecret = "callback-secret-0123456789abcdef"
	var daemon atomic.Value // the daemon's base URL
	cb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		base, _ := daemon.Load().(string)
		if base == "" {
			http.Error(w, "not up yet", http.StatusServiceUnavailable)
			return
		}
		body, _ := io.ReadAll(r.Body)
		req, _ := http.NewRequest(http.MethodPost, base+"/payments/callback", bytes.NewReader(body))
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	t.Cleanup(cb.Close)
	pay, err := fakepay.New(fakepay.WithCallback(cb.URL, []byte(cbSecret)), fakepay.WithCallbackRetry(20, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	paySrv := httptest.NewServer(pay.Handler())
	t.Cleanup(func() { paySrv.Close(); _ = pay.Close() })
	t.Setenv("ORDERS_PAYMENT_URL", paySrv.URL)
	t.Setenv("ORDERS_PAYMENT_CALLBACK_SECRET", cbSecret)
	t.Setenv("ORDERS_INVARIANT_INTERVAL", "100ms")
	t.Setenv("ORDERS_LOG_FORMAT", "json")
	var out strings.Builder
	if err := run(ctx, []string{"seed", "-product", "42", "-stock", "2", "-price", "1999"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	base, stop := startServeLog(t, &logs)
	daemon.Store(base)
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(base + path)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %v", path, resp, err)
		}
		_ = resp.Body.Close()
	}
	tok, _ := auth.Mint([]byte("0123456789abcdef0123456789abcdef"), "u1", time.Hour)
	req, _ := http.NewRequest(http.MethodPost, base+"/orders", strings.NewReader(`{"productId":42,"quantity":1,"addressVersion":"v1"}`))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Idempotency-Key", "k1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /orders: %d %s", resp.StatusCode, body)
	}
	var created struct {
		OrderID string `json:"orderId"`
	}
	if err := json.Unmarshal(body, &created); err != nil || created.OrderID == "" {
		t.Fatalf("created %s: %v", body, err)
	}
	// The charge's reply is lost: the order is PAYING, and the provider's
	// signed callback settles it, charged once.
	if err := pay.Inject(payment.RequestID(created.OrderID), fakepay.FaultLoseReply, 1); err != nil {
		t.Fatal(err)
	}
	req, _ = http.NewRequest(http.MethodPost, base+"/orders/"+created.OrderID+"/pay", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusOK {
		t.Fatalf("pay: %d %s", resp.StatusCode, body)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ = http.NewRequest(http.MethodGet, base+"/orders/"+created.OrderID, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if strings.Contains(string(body), `"status":"PAID"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("order not PAID by the callback: %s; provider %+v", body, pay.Stats().Callbacks)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st := pay.Stats(); st.Charges != 1 {
		t.Fatalf("charged %d times", st.Charges)
	}
	// The relay publishes the order's events to the stream on the first
	// master: created, then paid.
	evRedis := redis.NewClient(testbed.ClientOptions(bed.RedisAddrs()[0]))
	defer func() { _ = evRedis.Close() }()
	var types []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		msgs, err := evRedis.XRange(ctx, "orders:events", "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		types = types[:0]
		for _, m := range msgs {
			if m.Values["order_id"] == created.OrderID {
				types = append(types, fmt.Sprint(m.Values["type"]))
			}
		}
		if len(types) >= 2 || time.Now().After(deadline) {
			break
		}
	}
	if strings.Join(types, " ") != "order.created order.paid" {
		t.Fatalf("events on the stream: %q, want order.created then order.paid", types)
	}
	resp, err = http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	for _, m := range []string{`orders_place_total{outcome="created"} 1`, `orders_idempotency_claims_total{outcome="CREATED"} 1`, "quorum",
		// The invariant watchdog runs, on a healthy database.
		`orders_invariant_violations{check="non_negative_stock"} 0`, `orders_invariant_violations{check="one_order_per_idempotency_key"} 0`,
		`orders_invariant_violations{check="stock_balance"} 0`, `orders_invariant_violations{check="one_charge_per_payment_request"} 0`,
		`orders_invariant_violations{check="stuck_paying"} 0`, "orders_invariant_check_errors_total 0"} {
		if !strings.Contains(string(metrics), m) {
			t.Errorf("metrics lack %s", m)
		}
	}
	// Stock moved by hand: the watchdog, running in the background, sees it.
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, `UPDATE product_stock SET available = available + 1 WHERE product_id = '42'`)
	_ = conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for deadline = time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err = http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		metrics, _ = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if strings.Contains(string(metrics), `orders_invariant_violations{check="stock_balance"} 1`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the watchdog never reported the stock moved by hand")
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	checkServeLog(t, logs.String(), dsn, cbSecret, "0123456789abcdef0123456789abcdef")
}

// checkServeLog checks the daemon's JSON log: one line per order request
// with the lock's key and token digest, and no secret or lock token in any
// line.
func checkServeLog(t *testing.T, log, dsn string, secrets ...string) {
	t.Helper()
	var request map[string]any
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		if m["msg"] == "order request" {
			request = m
		}
	}
	if request == nil {
		t.Fatalf("no order request line in the log:\n%s", log)
	}
	lock, _ := request["lock"].(map[string]any)
	digest, _ := lock["token"].(string)
	if request["idempotency"] != "CREATED" || lock["key"] != "stock:42" || lock["unlock"] != "released" || !regexp.MustCompile(`^[0-9a-f]{8}$`).MatchString(digest) {
		t.Errorf("order request line: %v", request)
	}
	// Lock tokens are rand.Text: 26 characters of base32.
	if tok := regexp.MustCompile(`[A-Z2-7]{26}`).FindString(log); tok != "" {
		t.Errorf("the log holds what looks like a lock token (%s):\n%s", tok, log)
	}
	if cfg, err := pgx.ParseConfig(dsn); err == nil && cfg.Password != "" {
		secrets = append(secrets, cfg.Password)
	}
	for _, sec := range secrets {
		if strings.Contains(log, sec) {
			t.Errorf("the log shows a secret")
		}
	}
}

// /readyz names what is wrong, never a driver's error: those carry hosts,
// ports and user names.
func TestReadyzLeaksNoDriverError(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Redis: 1, Postgres: true})
	t.Setenv("ORDERS_DATABASE_URL", bedtest.NewDatabase(t, bed.Postgres))
	// One live master of three: no majority.
	t.Setenv("ORDERS_REDIS_ADDRS", strings.Join(append(bed.RedisAddrs(), "127.0.0.1:1", "127.0.0.1:2"), ","))
	t.Setenv("ORDERS_JWT_SECRET", "0123456789abcdef0123456789abcdef")
	t.Setenv("ORDERS_LISTEN", "127.0.0.1:0")
	t.Setenv("ORDERS_PAYMENT_URL", "http://127.0.0.1:9")
	t.Setenv("ORDERS_LOCK_FALLBACK", "reject")
	base, stop := startServe(t)
	defer func() { _ = stop() }()
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "Redis") {
		t.Fatalf("/readyz: %d %s", resp.StatusCode, body)
	}
	for _, leak := range []string{"127.0.0.1:1", "127.0.0.1:2", "dial", "refused"} {
		if strings.Contains(string(body), leak) {
			t.Fatalf("/readyz names %q: %s", leak, body)
		}
	}
}

// ordersd authenticates to Redis masters that require a password
// (ORDERS_REDIS_PASSWORD): without it the masters refuse every call, with it
// the daemon is ready.
func TestRedisPassword(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Redis: 1, Postgres: true})
	admin := bed.Redis[0].Admin()
	defer admin.Close()
	const password = "redis-password-0123456789"
	if err := admin.ConfigSet(context.Background(), "requirepass", password).Err(); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ORDERS_DATABASE_URL", bedtest.NewDatabase(t, bed.Postgres))
	t.Setenv("ORDERS_REDIS_ADDRS", strings.Join(bed.RedisAddrs(), ","))
	t.Setenv("ORDERS_JWT_SECRET", "0123456789abcdef0123456789abcdef")
	t.Setenv("ORDERS_LISTEN", "127.0.0.1:0")
	t.Setenv("ORDERS_PAYMENT_URL", "http://127.0.0.1:9")
	t.Setenv("ORDERS_LOCK_FALLBACK", "reject")
	readyz := func() int {
		t.Helper()
		base, stop := startServe(t)
		defer func() { _ = stop() }()
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if code := readyz(); code != http.StatusServiceUnavailable {
		t.Fatalf("without the password: /readyz %d", code)
	}
	t.Setenv("ORDERS_REDIS_PASSWORD", password)
	if code := readyz(); code != http.StatusOK {
		t.Fatalf("with the password: /readyz %d", code)
	}
	// A CA file without a certificate is a configuration error.
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ORDERS_REDIS_TLS_CA_FILE", ca)
	if _, err := parseConfig(nil, io.Discard); err == nil || !strings.Contains(err.Error(), "ORDERS_REDIS_TLS_CA_FILE") {
		t.Fatalf("bad CA file: %v", err)
	}
}

// startServe runs the daemon with the configuration in the environment and
// returns its base URL once it listens, and a stop that shuts it down and
// returns serve's error (both bounded by 30s).
func startServe(t *testing.T) (base string, stop func() error) {
	t.Helper()
	return startServeLog(t, io.Discard)
}

// startServeLog is startServe with the daemon's log written to w.
func startServeLog(t *testing.T, w io.Writer) (base string, stop func() error) {
	t.Helper()
	cfg, err := parseConfig(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, ready, w) }()
	stop = func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("serve did not stop within 30s")
		}
	}
	select {
	case addr := <-ready:
		return "http://" + addr, stop
	case err := <-done:
		cancel()
		t.Fatalf("serve: %v", err)
	case <-time.After(30 * time.Second):
		_ = stop()
		t.Fatal("serve did not start")
	}
	return "", nil
}
