package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/internal/syncbuf"
)

// TestServeEtcdBackend: with ORDERS_LOCK_BACKEND=etcd the stock lock is
// on etcd (its leases in the request log), orders and replays work, and
// with etcd's majority paused the daemon stays ready, degraded, and
// Postgres arbitrates the orders alone.
func TestServeEtcdBackend(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Redis: 3, Postgres: true, Etcd: 3})
	bedEnv(t, bed, 3)
	t.Setenv("ORDERS_LOCK_BACKEND", "etcd")
	t.Setenv("ORDERS_LOCK", "on") // every order under the lock, on etcd
	t.Setenv("ORDERS_ETCD_ENDPOINTS", strings.Join(bed.EtcdEndpoints(), ","))
	t.Setenv("ORDERS_LOCK_WAIT", "1s")
	var logs syncbuf.Buffer
	base, stopServe := startServeLog(t, &logs)
	stop := sync.OnceValue(stopServe)
	defer func() { _ = stop() }()
	if code, body := get(t, base, "/readyz"); code != http.StatusOK || body != "ready\n" {
		t.Fatalf("/readyz: %d %q", code, body)
	}
	for i := range 2 {
		if code, body := postOrder(t, base, fmt.Sprintf("k%d", i)); code != http.StatusCreated {
			t.Fatalf("order %d: %d %s", i, code, body)
		}
	}
	if code, _ := postOrder(t, base, "k0"); code != http.StatusCreated {
		t.Fatalf("replay of k0: %d", code)
	}
	_, metrics := get(t, base, "/metrics")
	if !strings.Contains(metrics, `quorumlock_acquire_total{result="acquired"}`) {
		t.Errorf("no etcd acquisitions in the lock metrics:\n%s", grepLines(metrics, "quorumlock_acquire"))
	}
	for _, n := range bed.Etcd[1:] {
		if err := n.Pause(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	code, body := get(t, base, "/readyz")
	if code != http.StatusOK || !strings.HasPrefix(body, "ready (degraded: etcd does not answer with a leader") {
		t.Fatalf("/readyz with etcd's majority paused: %d %q", code, body)
	}
	if code, body := postOrder(t, base, "k2"); code != http.StatusCreated {
		t.Fatalf("an order with etcd's majority paused: %d %s", code, body)
	}
	if code, _ := postOrder(t, base, "k3"); code != http.StatusConflict {
		t.Fatalf("the fourth unit of three: %d, want 409", code)
	}
	// k2 fell back to Postgres; k3, on a product now sold out, was
	// answered from the sold-out report without the lock.
	if _, metrics := get(t, base, "/metrics"); !strings.Contains(metrics, `orders_lock_fallback_total{mode="db"} 1`) {
		t.Errorf("the order without etcd did not fall back to Postgres:\n%s", grepLines(metrics, "orders_lock_fallback"))
	}
	for _, n := range bed.Etcd[1:] {
		if err := n.Resume(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if !strings.Contains(logs.String(), `"backend":"etcd"`) {
		t.Errorf("the start line does not name the etcd backend:\n%s", logs.String())
	}
}
