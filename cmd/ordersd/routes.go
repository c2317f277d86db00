package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/orders"
)

// routes is the daemon's HTTP handler: the order API (with the payment
// callbacks), /healthz, /readyz and /metrics.
func routes(d *deps, cfg config) http.Handler {
	mux := http.NewServeMux()
	api := d.svc.Handler(d.verifier)
	mux.Handle("/orders", api)
	mux.Handle("/orders/", api)
	mux.Handle("POST /payments/callback", api)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", readyz(d, cfg))
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{}))
	return mux
}

// readyz answers /readyz: 200 "ready", 200 "ready (degraded: ...)" when
// orders are still taken with a Redis fault, or 503 "not ready: ...";
// with several Postgres hosts, a second line names the primary. The
// answer names what is wrong, never a driver's error (which can carry hosts
// and user names); the log has the details.
func readyz(d *deps, cfg config) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h := readiness(r.Context(), d.pool, d.clients, d.etcdUp)
		status, body := h.verdict(cfg.useLock, cfg.fallback)
		switch {
		case status != http.StatusOK:
			d.log.Warn("not ready", "postgres", h.pgErr, "redis", h.redisErr(), "etcd", h.etcdErr)
			http.Error(w, body, status)
		case body != "ready":
			d.log.Warn("ready, degraded", "redis", h.redisErr(), "etcd", h.etcdErr)
			_, _ = io.WriteString(w, body+"\n"+h.primaryLine())
		default:
			_, _ = io.WriteString(w, "ready\n"+h.primaryLine())
		}
	}
}

// health is what a readiness probe found.
type health struct {
	pgErr     error   // Postgres did not answer, or answered as a standby
	primary   primary // the host of ORDERS_DATABASE_URL that answered
	masters   int     // the Redis masters
	up        int     // of which answered
	redisErrs []error // the others' errors, for the log
	etcd      bool    // the lock is on etcd
	etcdErr   error   // etcd did not answer a read with a leader
}

// readiness asks Postgres whether it takes writes (and which host of the
// URL answered), pings every Redis master and, for the etcd backend, the
// etcd cluster (a read that needs a leader), within 2s in all; Postgres is
// asked beside the others.
func readiness(ctx context.Context, pool *pgxpool.Pool, clients []redis.UniversalClient, etcdUp func(context.Context) error) health {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	h := health{masters: len(clients), etcd: etcdUp != nil}
	pg := make(chan struct{})
	go func() { // a connection may first try a host that does not answer
		defer close(pg)
		if h.primary, h.pgErr = probePrimary(ctx, pool); h.pgErr != nil {
			h.pgErr = fmt.Errorf("postgres: %w", h.pgErr)
		}
	}()
	if etcdUp != nil {
		if err := etcdUp(ctx); err != nil {
			h.etcdErr = fmt.Errorf("etcd: %w", err)
		}
	}
	for i, c := range clients {
		if err := c.Ping(ctx).Err(); err != nil {
			h.redisErrs = append(h.redisErrs, fmt.Errorf("master %d: %w", i, err))
			continue
		}
		h.up++
	}
	<-pg
	return h
}

// primaryLine names the primary when ORDERS_DATABASE_URL has several
// hosts (by its place in the URL, not its address); empty otherwise.
func (h health) primaryLine() string {
	if h.primary.hosts < 2 {
		return ""
	}
	return "postgres primary: " + h.primary.String() + "\n"
}

// majority reports whether a majority of the masters answered: the lock
// can be taken.
func (h health) majority() bool { return h.up >= h.masters/2+1 }

// lockLost reports whether the stock lock is out of reach: etcd without a
// leader, or a minority of the masters.
func (h health) lockLost(useLock bool) bool {
	if h.etcd {
		return h.etcdErr != nil
	}
	return useLock && !h.majority()
}

// redisErr is the masters' fault for the log, nil when all answered.
func (h health) redisErr() error {
	if h.up == h.masters {
		return nil
	}
	return fmt.Errorf("redis: %d of %d masters answer, a majority is %d: %w", h.up, h.masters, h.masters/2+1, errors.Join(h.redisErrs...))
}

// verdict is the /readyz status and body for h. Postgres decides every
// order, so without it the instance is not ready. With the lock on, a lost
// Redis majority makes it not ready under ORDERS_LOCK_FALLBACK=reject (every
// order would be refused) and degraded under db (Postgres arbitrates). With
// the lock off, the masters hold only idempotency records: any master down
// is degraded, since Postgres answers the replays whose records it held.
func (h health) verdict(useLock bool, fallback orders.Fallback) (int, string) {
	lockLost := h.lockLost(useLock)
	lockOnRedis := useLock && !h.etcd
	if h.pgErr != nil || (lockLost && fallback == orders.FallbackReject) {
		msg := "not ready:"
		switch {
		case errors.Is(h.pgErr, errReadOnly):
			msg += " Postgres answers as a standby only (no primary);"
		case h.pgErr != nil:
			msg += " Postgres does not answer;"
		}
		switch {
		case lockLost && h.etcd:
			msg += " etcd does not answer with a leader;"
		case lockLost:
			msg += " a majority of the Redis masters does not answer;"
		case !lockOnRedis && h.up < h.masters:
			msg += fmt.Sprintf(" %d of %d Redis masters do not answer;", h.masters-h.up, h.masters)
		}
		return http.StatusServiceUnavailable, msg
	}
	switch {
	case lockLost && h.etcd:
		return http.StatusOK, "ready (degraded: etcd does not answer with a leader; Postgres arbitrates)"
	case lockLost:
		return http.StatusOK, "ready (degraded: a majority of the Redis masters does not answer; Postgres arbitrates)"
	case !lockOnRedis && h.up < h.masters:
		where := "the stock lock is off"
		if h.etcd {
			where = "the stock lock is on etcd"
		}
		return http.StatusOK, fmt.Sprintf("ready (degraded: %d of %d Redis masters do not answer; Postgres answers the replays whose idempotency records they hold; %s)", h.masters-h.up, h.masters, where)
	}
	return http.StatusOK, "ready"
}
