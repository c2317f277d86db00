package main

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/orders"
)

// TestReadyVerdict: what /readyz answers for every mix of the lock's mode,
// the fallback, Postgres and the masters.
func TestReadyVerdict(t *testing.T) {
	pgDown := errors.New("postgres: dial tcp 10.0.0.1:5432: connection refused")
	errNoLeader := errors.New("etcd: no leader at 10.0.0.2:2379: connection refused")
	cases := []struct {
		name     string
		useLock  bool
		fallback orders.Fallback
		h        health
		status   int
		body     string // a prefix, then each ;-separated part must appear
	}{
		{"all up", true, orders.FallbackDB, health{masters: 3, up: 3}, 200, "ready"},
		{"minority down, lock on", true, orders.FallbackReject, health{masters: 3, up: 2}, 200, "ready"},
		{"majority down, db", true, orders.FallbackDB, health{masters: 3, up: 1}, 200, "ready (degraded: a majority of the Redis masters does not answer; Postgres arbitrates)"},
		{"majority down, reject", true, orders.FallbackReject, health{masters: 3, up: 1}, 503, "not ready: a majority of the Redis masters does not answer;"},
		{"postgres down, lock on", true, orders.FallbackDB, health{masters: 3, up: 3, pgErr: pgDown}, 503, "not ready: Postgres does not answer;"},
		{"both down, lock on", true, orders.FallbackDB, health{masters: 3, up: 0, pgErr: pgDown}, 503, "not ready: Postgres does not answer; a majority of the Redis masters does not answer;"},
		{"all up, lock off", false, orders.FallbackDB, health{masters: 3, up: 3}, 200, "ready"},
		{"one down, lock off", false, orders.FallbackDB, health{masters: 3, up: 2}, 200, "ready (degraded: 1 of 3 Redis masters do not answer; Postgres answers the replays"},
		{"all down, lock off", false, orders.FallbackDB, health{masters: 3, up: 0}, 200, "ready (degraded: 3 of 3 Redis masters do not answer;"},
		{"postgres down, lock off", false, orders.FallbackDB, health{masters: 3, up: 3, pgErr: pgDown}, 503, "not ready: Postgres does not answer;"},
		{"both down, lock off", false, orders.FallbackDB, health{masters: 3, up: 1, pgErr: pgDown}, 503, "not ready: Postgres does not answer; 2 of 3 Redis masters do not answer;"},
		{"etcd up, masters down", true, orders.FallbackReject, health{masters: 3, up: 1, etcd: true}, 200, "ready (degraded: 2 of 3 Redis masters do not answer; Postgres answers the replays whose idempotency records they hold; the stock lock is on etcd)"},
		{"etcd without a leader, db", true, orders.FallbackDB, health{masters: 3, up: 3, etcd: true, etcdErr: errNoLeader}, 200, "ready (degraded: etcd does not answer with a leader; Postgres arbitrates)"},
		{"etcd without a leader, reject", true, orders.FallbackReject, health{masters: 3, up: 3, etcd: true, etcdErr: errNoLeader}, 503, "not ready: etcd does not answer with a leader;"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body := c.h.verdict(c.useLock, c.fallback)
			if status != c.status || !strings.HasPrefix(body, c.body) {
				t.Fatalf("got %d %q, want %d %q", status, body, c.status, c.body)
			}
			if status == http.StatusOK && c.body == "ready" && body != "ready" {
				t.Fatalf("got %q, want exactly ready", body)
			}
			if strings.Contains(body, "10.0.0.1") || strings.Contains(body, "refused") {
				t.Fatalf("the answer carries a driver's error: %q", body)
			}
		})
	}
}
