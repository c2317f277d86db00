package orders_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quorumlock/quorumlock/devtools/blackhole"
	"github.com/quorumlock/quorumlock/orders"
	"github.com/quorumlock/quorumlock/orders/auth"
	"github.com/quorumlock/quorumlock/orders/store"
)

// A database that does not answer (a paused or cut-off primary) costs the
// routes other than POST /orders at most their deadline: the client gets
// 503 with Retry-After. (Three pay requests sent while a primary was
// paused had no answer within their clients' 20 s: nothing bounded them.)
func TestRequestsEndAtTheDeadline(t *testing.T) {
	hole, err := blackhole.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer hole.Close()
	pool, err := pgxpool.New(t.Context(), hole.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	st, err := store.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := orders.New(st, orders.WithDeadline(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	v, err := auth.NewVerifier(secret)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc.Handler(v))
	defer srv.Close()
	client := &http.Client{Timeout: 5 * time.Second}
	for _, rt := range []struct{ method, path string }{
		{http.MethodGet, "/orders/ord_00000000000000000000000000000001"},
		{http.MethodPost, "/orders/ord_00000000000000000000000000000001/cancel"},
		{http.MethodGet, "/orders/requests?key=k1"},
	} {
		req, _ := http.NewRequest(rt.method, srv.URL+rt.path, strings.NewReader(""))
		req.Header.Set("Authorization", "Bearer "+tokenFor(t, "u1"))
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v (no answer)", rt.method, rt.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		took := time.Since(start)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || took > 2*time.Second {
			t.Errorf("%s %s: %d (Retry-After %q) after %v: %s; want 503 with Retry-After within the 300ms deadline",
				rt.method, rt.path, resp.StatusCode, resp.Header.Get("Retry-After"), took.Round(time.Millisecond), body)
		}
	}
}
