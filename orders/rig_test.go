package orders_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/devtools/fakepay"
	"github.com/quorumlock/quorumlock/devtools/storetest"
	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/fencing"
	"github.com/quorumlock/quorumlock/orders"
	"github.com/quorumlock/quorumlock/orders/auth"
	"github.com/quorumlock/quorumlock/orders/idem"
	"github.com/quorumlock/quorumlock/orders/payment"
	"github.com/quorumlock/quorumlock/orders/store"
	"github.com/quorumlock/quorumlock/quorum"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := shared.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "the shared bed: close: %v\n", err)
		code = max(code, 1)
	}
	if code == 0 {
		// goleak's check of TestMain (VerifyTestMain), once the shared
		// bed is closed.
		err := goleak.Find(
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
			goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper"),
			goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		)
		if err != nil {
			fmt.Fprintf(os.Stderr, "goleak: Errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// shared is the bed (five masters, Postgres) that the package's tests take
// in turn (newRig); TestMain closes it.
var shared = bedtest.Shared{Options: testbed.Options{Redis: 5, Postgres: true}}

var secret = []byte("test-secret-of-32-bytes-length!!")

// rig is the shared bed (five masters, Postgres, reset for the test) with
// a migrated database of the test's own and product 42 stocked, on which
// tests start service instances.
type rig struct {
	bed  *testbed.Bed
	dsn  string
	pool *pgxpool.Pool
	st   *store.Store
}

func newRig(t *testing.T, stock int64) *rig {
	t.Helper()
	bed := shared.Take(t)
	ctx := context.Background()
	db := storetest.New(t, bed.Postgres)
	dsn, pool, st := db.DSN, db.Pool, db.Store
	if err := st.SeedProduct(ctx, "42", stock, 1999); err != nil {
		t.Fatal(err)
	}
	// A brand-new bed has never held a lock: skip the amnesia warm-up.
	for _, n := range bed.Redis {
		c := n.Admin()
		err := quorum.TrustNode(ctx, c)
		_ = c.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	return &rig{bed: bed, dsn: dsn, pool: pool, st: st}
}

type instance struct {
	srv      *httptest.Server
	svc      *orders.Service
	claims   *idem.Store
	payments *payment.Service
	provider *fakepay.Server // nil unless the instance has its own fake
}

// instance starts one ordersd-equivalent service with its own clients and
// pool, as a separate process would have, and its own in-process fake
// payment provider.
func (r *rig) instance(t *testing.T, opts ...orders.Option) *instance {
	t.Helper()
	fake, err := fakepay.New()
	if err != nil {
		t.Fatal(err)
	}
	in := r.instanceWith(t, fake, opts...)
	in.provider = fake
	return in
}

// instanceWith is instance with the payment provider p.
func (r *rig) instanceWith(t *testing.T, p payment.Provider, opts ...orders.Option) *instance {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, r.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st, err := store.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	var clients []redis.UniversalClient
	for _, c := range bedtest.RedisClients(t, r.bed) {
		clients = append(clients, c)
	}
	issuer, err := fencing.NewReserver(pool)
	if err != nil {
		t.Fatal(err)
	}
	// The node timeout leaves room for a node that fsyncs every write on a
	// loaded machine: a node that answers late must not count as a failed
	// one, or contention would look like a lost quorum.
	locker, err := quorum.New(clients, quorum.WithTTL(5*time.Second), quorum.WithMaxWait(3*time.Second),
		quorum.WithNodeTimeout(time.Second), quorum.WithFencer(issuer))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locker.Close() })
	claims, err := idem.New(clients, idem.WithLease(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	payments, err := payment.NewService(st, p, payment.WithCallTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// The tests hold batches at gates as long as they need: no request is
	// shed for its wait unless a test says so.
	all := append([]orders.Option{orders.WithQueue(orders.DefaultQueueLimit, time.Minute), orders.WithIdempotency(claims), orders.WithLocker(locker),
		orders.WithPayments(payments)}, opts...)
	svc, err := orders.New(st, all...)
	if err != nil {
		t.Fatal(err)
	}
	v, err := auth.NewVerifier(secret)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc.Handler(v))
	t.Cleanup(srv.Close)
	return &instance{srv: srv, svc: svc, claims: claims, payments: payments}
}

func tokenFor(t testing.TB, user string) string {
	t.Helper()
	tok, err := auth.Mint(secret, user, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// answer is what a client got.
type answer struct {
	Status int
	Header http.Header
	Body   string
}

func (a answer) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(a.Body), &m); err != nil {
		t.Fatalf("body %q: %v", a.Body, err)
	}
	return m
}

func do(t testing.TB, method, url, token, key string, body []byte) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	req.Header.Set("Content-Type", "application/json")
	return send(t, req)
}

// send sends req and reads the whole answer.
func send(t testing.TB, req *http.Request) answer {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{Status: resp.StatusCode, Header: resp.Header, Body: string(b)}
}

func post(t testing.TB, in *instance, user, key, body string) answer {
	return do(t, http.MethodPost, in.srv.URL+"/orders", tokenFor(t, user), key, []byte(body))
}

// postRetrying posts like post and, while the answer is a 503, does what a
// 503 asks of a client: it waits the answer's Retry-After and sends the same
// request, with the same Idempotency-Key, again; at most tries times in all.
// It returns the last answer and how many 503s came before it.
func postRetrying(t testing.TB, in *instance, user, key, body string, tries int) (answer, int) {
	t.Helper()
	retried := 0
	for {
		a := post(t, in, user, key, body)
		if a.Status != http.StatusServiceUnavailable || retried+1 >= tries {
			return a, retried
		}
		wait, ok := retryAfter(a)
		if !ok {
			t.Errorf("503 without a usable Retry-After (%q): %s", a.Header.Get("Retry-After"), a.Body)
			return a, retried
		}
		retried++
		t.Logf("%s/%s: 503, retrying after %v: %s", user, key, wait, a.Body)
		time.Sleep(wait)
	}
}

// retryAfter reads an answer's Retry-After (whole seconds, at least 1).
func retryAfter(a answer) (time.Duration, bool) {
	s, err := strconv.Atoi(a.Header.Get("Retry-After"))
	if err != nil || s < 1 {
		return 0, false
	}
	return time.Duration(s) * time.Second, true
}

const buy42 = `{"productId": "42", "quantity": 1, "addressVersion": "v1", "couponId": null}`

func (r *rig) stock(t *testing.T) int64 {
	t.Helper()
	s, err := r.st.Stock(context.Background(), "42")
	if err != nil {
		t.Fatal(err)
	}
	return s.Available
}

func (r *rig) orderCount(t *testing.T, where string, args ...any) int {
	t.Helper()
	var n int
	if err := r.pool.QueryRow(context.Background(), "SELECT count(*) FROM orders WHERE "+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
