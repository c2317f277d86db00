package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/quorumlock/quorumlock/internal/failpoint"
	"github.com/quorumlock/quorumlock/orders"
	"github.com/quorumlock/quorumlock/orders/payment"
)

// serve runs the HTTP server and the background runners until ctx ends.
// When ready is not nil, it receives the bound address once the server
// listens. It returns only when every goroutine it started has ended, and
// then closes what it opened.
func serve(ctx context.Context, cfg config, ready chan<- string, stderr io.Writer) error {
	log := cfg.logger(stderr)
	warnFailpoints(cfg, log)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	d, cleanup, err := dependencies(ctx, cfg, log, reg)
	if err != nil {
		return err
	}
	defer cleanup()
	rw, err := newReplicationWatch(d.pool, cfg.pghaMonitorURL, reg, log)
	if err != nil {
		return err
	}
	defer rw.close()
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	// Handlers run under base, which is cancelled when a graceful shutdown
	// runs out of time, so no request outlives the process's resources.
	base, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	srv := newServer(base, routes(d, cfg))
	log.Info("ordersd listening", "addr", ln.Addr().String(), "redis", cfg.redisAddrs, "lock", lockMode(cfg.useLock, cfg.lockRule), "backend", cfg.lockBackend, "fallback", cfg.fallback)
	if ready != nil {
		ready <- ln.Addr().String()
	}
	return runAll(ctx, cfg.shutdownWait, srv, ln, cancelBase, runners(cfg, d, rw), log)
}

// warnFailpoints says when QUORUMLOCK_FAILPOINTS is set: ignored by this
// build, or armed.
func warnFailpoints(cfg config, log *slog.Logger) {
	if cfg.failpoints.Ignored() {
		log.Warn(failpoint.EnvVar + " is set but this build has no failpoints (build with -tags failpoints): ignored")
	}
	if cfg.failpoints.Armed() {
		log.Warn("failpoints armed: this process will crash or freeze on purpose", "failpoints", cfg.failpoints.String())
	}
}

// lockMode is ORDERS_LOCK's word for useLock and rule: auto, on or off.
func lockMode(useLock bool, rule orders.LockRule) string {
	switch {
	case !useLock:
		return "off"
	case rule == orders.LockAlways:
		return "on"
	}
	return "auto"
}

// newServer is the HTTP server of h, its handlers running under base.
func newServer(base context.Context, h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 64 << 10,
		BaseContext: func(net.Listener) context.Context { return base }}
}

// runner is a background job of the daemon: it runs until its context
// ends.
type runner struct {
	name string
	run  func(ctx context.Context) error
}

// loop runs r. Ending because its context ended is not an error; any other
// error is, named after r.
func (r runner) loop(ctx context.Context) error {
	if err := r.run(ctx); err != nil && ctx.Err() == nil {
		return fmt.Errorf("%s: %w", r.name, err)
	}
	return nil
}

// runners are the background jobs of this instance: the payment
// reconciler, the housekeeping (expiry and purges), the watch on the
// Postgres primary and rw, the watch on its replication (and on the
// pg_auto_failover monitor when one is set), and the outbox relay and the
// invariant watchdog when they are on.
func runners(cfg config, d *deps, rw *replicationWatch) []runner {
	hk := housekeeping{store: d.store, relay: d.relay, svc: d.svc, hold: cfg.hold, outcomeRetention: cfg.outcomeRetention,
		outboxRetention: cfg.outboxRetention, every: cfg.expireEvery, log: d.log}
	rs := []runner{
		{name: "payment reconciler", run: func(ctx context.Context) error {
			return d.payments.RunReconciler(ctx, cfg.reconcile, cfg.reconcile, func(rep payment.ReconcileReport, err error) {
				logReconcile(d.log, rep, err)
			})
		}},
		{name: "housekeeping", run: hk.run},
		{name: "postgres primary watch", run: primaryWatch{pool: d.pool, every: time.Second, timeout: 2 * time.Second, log: d.log, lost: d.hosts.forget}.run},
		{name: "postgres replication watch", run: rw.run},
	}
	if d.relay != nil {
		rs = append(rs, runner{name: "outbox relay", run: d.relay.Run})
	}
	if d.dog != nil {
		rs = append(rs, runner{name: "invariant watchdog", run: d.dog.Run})
	}
	return rs
}

// runAll runs the HTTP server on ln and the runners under one errgroup,
// and returns once every one of them has ended. The server stops first:
// when ctx ends, or when a member of the group fails, srv.Shutdown lets
// the requests in flight finish within wait, and then their base context
// is cancelled (cancelBase) and the server closed. Only then are the
// runners stopped, so they keep working while the last requests drain. It
// returns the first error: the server's, a runner's, or the shutdown's when
// requests had to be cut off.
func runAll(ctx context.Context, wait time.Duration, srv *http.Server, ln net.Listener, cancelBase func(), rs []runner, log *slog.Logger) error {
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBG()
	g, gctx := errgroup.WithContext(bg)
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http server: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		defer stopBG() // the runners stop once the server has
		return shutdown(ctx, gctx, srv, wait, cancelBase, log)
	})
	for _, r := range rs {
		g.Go(func() error { return r.loop(gctx) })
	}
	return g.Wait()
}

// shutdown waits until ctx ends or failed does (a member of the group
// failed), then shuts srv down: the requests in flight may finish within
// wait; those still running then have their base context cancelled and
// their connections closed, and shutdown returns the error.
func shutdown(ctx, failed context.Context, srv *http.Server, wait time.Duration, cancelBase func(), log *slog.Logger) error {
	select {
	case <-ctx.Done():
		log.Info("ordersd shutting down")
	case <-failed.Done():
		log.Error("ordersd shutting down: a part of it failed", "err", context.Cause(failed))
	}
	sctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("requests still running after the shutdown wait; cancelling them", "err", err)
		cancelBase()
		_ = srv.Close()
		return fmt.Errorf("shutdown: requests cut off after %v: %w", wait, err)
	}
	return nil
}
