// Command ordersd serves the idempotent order API on Redis masters and
// Postgres.
//
//	ordersd [serve] [flags]                  serve HTTP (flags and ORDERS_* variables: see -h)
//	ordersd migrate                          run the database migrations and exit
//	ordersd token -user u1001 [-ttl 1h]      print a dev bearer token signed with ORDERS_JWT_SECRET
//	ordersd seed -product 42 -stock 1 [-price 1999]   set a product's stock (for demos and tests)
//
// Endpoints besides the API: /healthz (the process is up), /readyz
// (Postgres and a majority of the Redis masters answer), /metrics
// (Prometheus).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/fencing"
	"github.com/quorumlock/quorumlock/internal/failpoint"
	"github.com/quorumlock/quorumlock/orders"
	"github.com/quorumlock/quorumlock/orders/auth"
	"github.com/quorumlock/quorumlock/orders/events"
	"github.com/quorumlock/quorumlock/orders/idem"
	"github.com/quorumlock/quorumlock/orders/payment"
	"github.com/quorumlock/quorumlock/orders/store"
	"github.com/quorumlock/quorumlock/orders/watchdog"
	"github.com/quorumlock/quorumlock/quorum"
	"github.com/quorumlock/quorumlock/quorum/quorumprom"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "ordersd:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		cfg, err := parseConfig(args, stderr)
		if err != nil {
			return err
		}
		return serve(ctx, cfg, nil, stderr)
	case "migrate":
		url, err := secret("ORDERS_DATABASE_URL")
		if err != nil {
			return err
		}
		if url == "" {
			return errors.New("ORDERS_DATABASE_URL is empty")
		}
		v, err := store.MigrateDSN(ctx, url)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "database at version %d\n", v)
		return nil
	case "token":
		return token(args, stdout)
	case "seed":
		return seed(ctx, args, stdout)
	}
	return fmt.Errorf("unknown command %q: want serve, migrate, token or seed", cmd)
}

func token(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("ordersd token", flag.ContinueOnError)
	user := fs.String("user", "", "user id (the token's sub)")
	ttl := fs.Duration("ttl", time.Hour, "lifetime")
	if err := fs.Parse(args); err != nil {
		return err
	}
	key, err := secret("ORDERS_JWT_SECRET")
	if err != nil {
		return err
	}
	tok, err := auth.Mint([]byte(key), *user, *ttl)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, tok)
	return nil
}

func seed(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("ordersd seed", flag.ContinueOnError)
	product := fs.String("product", "", "product id")
	stock := fs.Int64("stock", -1, "units available")
	price := fs.Int64("price", 0, "unit price in cents; 0 makes the product free: its orders are paid without a charge")
	if err := fs.Parse(args); err != nil {
		return err
	}
	url, err := secret("ORDERS_DATABASE_URL")
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := store.MigrateDSN(ctx, url); err != nil {
		return err
	}
	st, err := store.New(pool)
	if err != nil {
		return err
	}
	if err := st.SeedProduct(ctx, *product, *stock, *price); err != nil {
		return err
	}
	if *price == 0 {
		fmt.Fprintf(stdout, "product %s: %d units, free (paid without a charge)\n", *product, *stock)
		return nil
	}
	fmt.Fprintf(stdout, "product %s: %d units at %d cents\n", *product, *stock, *price)
	return nil
}

// redisOptions are the go-redis options of a lock client: calls bounded by
// their context, no automatic retries (a retried SET NX could report a
// lock it won as lost), short socket timeouts.
func redisOptions(addr string, cfg config) *redis.Options {
	return &redis.Options{
		Addr: addr, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: 64, DisableIdentity: true,
		Username: cfg.redisUser, Password: cfg.redisPassword, TLSConfig: cfg.redisTLS,
	}
}

// serve runs the HTTP server until ctx ends. When ready is not nil, it
// receives the bound address once the server listens.
func serve(ctx context.Context, cfg config, ready chan<- string, stderr io.Writer) error {
	log := cfg.logger(stderr)
	if cfg.failpoints.Ignored() {
		log.Warn(failpoint.EnvVar + " is set but this build has no failpoints (build with -tags failpoints): ignored")
	}
	if cfg.failpoints.Armed() {
		log.Warn("failpoints armed: this process will crash or freeze on purpose", "failpoints", cfg.failpoints.String())
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	if cfg.migrate {
		if _, err := store.MigrateDSN(ctx, cfg.databaseURL); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	pool, err := pgxpool.New(ctx, cfg.databaseURL)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer pool.Close()
	clients := make([]redis.UniversalClient, len(cfg.redisAddrs))
	for i, a := range cfg.redisAddrs {
		clients[i] = redis.NewClient(redisOptions(a, cfg))
	}
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()

	issuer, err := fencing.NewIssuer(pool)
	if err != nil {
		return err
	}
	obs, err := quorumprom.New(reg)
	if err != nil {
		return err
	}
	lockOpts := []quorum.Option{quorum.WithTTL(cfg.lockTTL), quorum.WithMaxWait(cfg.lockWait),
		quorum.WithFencer(issuer), quorum.WithObserver(obs)}
	if cfg.nodeTimeout > 0 {
		lockOpts = append(lockOpts, quorum.WithNodeTimeout(cfg.nodeTimeout))
	}
	if cfg.redisDurable {
		lockOpts = append(lockOpts, quorum.WithDurableNodes(true))
	}
	locker, err := quorum.New(clients, lockOpts...)
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	defer func() { _ = locker.Close() }()
	claims, err := idem.New(clients, idem.WithTTL(cfg.idemTTL), idem.WithLease(cfg.idemLease))
	if err != nil {
		return fmt.Errorf("idempotency: %w", err)
	}
	st, err := store.New(pool, store.WithFailpoints(cfg.failpoints))
	if err != nil {
		return err
	}
	provider, err := payment.NewHTTPProvider(cfg.paymentURL, payment.WithAttemptTimeout(min(5*time.Second, cfg.payTimeout)))
	if err != nil {
		return fmt.Errorf("payments: %w", err)
	}
	payments, err := payment.NewService(st, provider, payment.WithCallTimeout(cfg.payTimeout), payment.WithFailpoints(cfg.failpoints))
	if err != nil {
		return err
	}
	vopts := []auth.Option{auth.WithMaxLifetime(cfg.jwtLifetime)}
	if cfg.jwtIssuer != "" {
		vopts = append(vopts, auth.WithIssuer(cfg.jwtIssuer))
	}
	if cfg.jwtAudience != "" {
		vopts = append(vopts, auth.WithAudience(cfg.jwtAudience))
	}
	verifier, err := auth.NewVerifier([]byte(cfg.jwtSecret), vopts...)
	if err != nil {
		return err
	}
	metrics, err := orders.NewMetrics(reg)
	if err != nil {
		return err
	}
	// The invariant watchdog feeds orders_invariant_violations, which the
	// correctness alerts read; with ORDERS_INVARIANT_INTERVAL=0 this
	// instance exports no such series.
	var dog *watchdog.Watchdog
	if cfg.invariantEvery > 0 {
		dog, err = watchdog.New(pool, watchdog.WithInterval(cfg.invariantEvery),
			watchdog.WithStuckPayingAfter(cfg.stuckPaying), watchdog.WithLogger(log), watchdog.WithRegisterer(reg))
		if err != nil {
			return err
		}
	} else {
		log.Info("invariant watchdog off (ORDERS_INVARIANT_INTERVAL=0): this instance exports no orders_invariant_violations")
	}
	// The outbox relay: every instance may run one; they share the rows
	// (SKIP LOCKED).
	var relay *events.Relay
	if cfg.relayEvery > 0 {
		evRedis := redis.NewClient(redisOptions(cfg.eventsAddr, cfg))
		defer func() { _ = evRedis.Close() }()
		evMetrics, err := events.NewMetrics(reg)
		if err != nil {
			return err
		}
		relay, err = events.NewRelay(pool, evRedis, events.WithStream(cfg.eventsStream), events.WithMaxLen(cfg.eventsMaxLen),
			events.WithInterval(cfg.relayEvery), events.WithMetrics(evMetrics), events.WithLogger(log), events.WithFailpoints(cfg.failpoints))
		if err != nil {
			return fmt.Errorf("events: %w", err)
		}
	} else {
		log.Info("outbox relay off (ORDERS_RELAY_INTERVAL=0): this instance publishes no order events")
	}
	svcOpts := []orders.Option{orders.WithIdempotency(claims), orders.WithLocker(orders.QuorumLocker(locker)),
		orders.WithFallback(cfg.fallback), orders.WithIdempotencyCodes(cfg.codes), orders.WithPayments(payments),
		orders.WithMetrics(metrics), orders.WithLogger(log), orders.WithFailpoints(cfg.failpoints)}
	if cfg.callbackKey != "" {
		svcOpts = append(svcOpts, orders.WithPaymentCallbacks([]byte(cfg.callbackKey), 0))
	}
	svc, err := orders.New(st, issuer, svcOpts...)
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	api := svc.Handler(verifier)
	mux.Handle("/orders", api)
	mux.Handle("/orders/", api)
	mux.Handle("POST /payments/callback", api)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		// With the db fallback the service still takes orders when the
		// Redis majority is gone, so only Postgres decides readiness then.
		// The answer names what is wrong, never a driver's error (which
		// can carry hosts and user names); the log has the details.
		redisErr, pgErr := readiness(r.Context(), pool, clients)
		if pgErr != nil || (redisErr != nil && cfg.fallback == orders.FallbackReject) {
			log.Warn("not ready", "postgres", pgErr, "redis", redisErr)
			msg := "not ready:"
			if pgErr != nil {
				msg += " Postgres does not answer;"
			}
			if redisErr != nil {
				msg += " a majority of the Redis masters does not answer;"
			}
			http.Error(w, msg, http.StatusServiceUnavailable)
			return
		}
		if redisErr != nil {
			log.Warn("ready, degraded", "redis", redisErr)
			_, _ = io.WriteString(w, "ready (degraded: a majority of the Redis masters does not answer; Postgres arbitrates)\n")
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return err
	}
	// Handlers run under base, which is cancelled when a graceful shutdown
	// runs out of time, so no request outlives the process's resources.
	base, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 64 << 10,
		BaseContext: func(net.Listener) context.Context { return base }}
	log.Info("ordersd listening", "addr", ln.Addr().String(), "redis", cfg.redisAddrs, "fallback", cfg.fallback)
	if ready != nil {
		ready <- ln.Addr().String()
	}

	bg, stopBG := context.WithCancel(ctx)
	reconciled := make(chan struct{})
	go func() {
		defer close(reconciled)
		_ = payments.RunReconciler(bg, cfg.reconcile, cfg.reconcile, func(rep payment.ReconcileReport, err error) {
			logReconcile(log, rep, err)
		})
	}()
	expired := make(chan struct{})
	go func() {
		defer close(expired)
		expireUnpaid(bg, st, relay, cfg.hold, cfg.outcomeRetention, cfg.outboxRetention, cfg.expireEvery, log)
	}()
	relayed := make(chan struct{})
	go func() {
		defer close(relayed)
		if relay != nil {
			_ = relay.Run(bg)
		}
	}()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		if dog != nil {
			_ = dog.Run(bg)
		}
	}()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	var serveErr error
	select {
	case serveErr = <-served:
	case <-ctx.Done():
		log.Info("ordersd shutting down")
		sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownWait)
		serveErr = srv.Shutdown(sctx)
		cancel()
		if serveErr != nil {
			log.Warn("requests still running after the shutdown wait; cancelling them", "err", serveErr)
			cancelBase()
			_ = srv.Close()
		}
		<-served
	}
	stopBG()
	<-reconciled
	<-expired
	<-watched
	<-relayed
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return serveErr
}

// readiness checks Postgres and whether a majority of the Redis masters
// answer.
func readiness(ctx context.Context, pool *pgxpool.Pool, clients []redis.UniversalClient) (redisErr, pgErr error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := pool.Ping(ctx); err != nil {
		pgErr = fmt.Errorf("postgres: %w", err)
	}
	up := 0
	for _, c := range clients {
		if c.Ping(ctx).Err() == nil {
			up++
		}
	}
	if up < len(clients)/2+1 {
		redisErr = fmt.Errorf("redis: %d of %d masters answer, a majority is %d", up, len(clients), len(clients)/2+1)
	}
	return redisErr, pgErr
}

// logReconcile writes what a reconcile round did: a line per payment it
// settled as failed or left open, with why, and the round's error when no
// payment line carries it.
func logReconcile(log *slog.Logger, rep payment.ReconcileReport, err error) {
	if rep.Paid+rep.Failed > 0 {
		log.Info("reconcile: payments settled", "paid", rep.Paid, "failed", rep.Failed, "rejected", rep.Rejected)
	}
	for _, p := range rep.Open {
		attrs := []any{"payment_request_id", p.RequestID, "order_id", p.OrderID, "attempts", p.Attempts, "reason", p.Reason}
		if p.Err != nil {
			log.Warn("reconcile: payment still open", append(attrs, "err", p.Err)...)
			continue
		}
		log.Info("reconcile: payment still open", attrs...)
	}
	if err != nil && len(rep.Open) == 0 {
		log.Warn("reconcile", "err", err)
	}
}

// expireUnpaid cancels unpaid orders (CREATED, or PAYMENT_FAILED) older
// than hold every interval, and returns their stock (store.ExpireOrders),
// then deletes saved non-order outcomes older than retention
// (store.PurgeOutcomes) and, when relay is not nil, events published longer
// than outboxRetention ago (Relay.PurgeSent), until ctx ends. Each round takes batches until one
// comes back short, at most 100 batches of each.
func expireUnpaid(ctx context.Context, st *store.Store, relay *events.Relay, hold, retention, outboxRetention, every time.Duration, log *slog.Logger) {
	const batch = 100
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for range 100 {
			got, err := st.ExpireOrders(ctx, hold, batch)
			if err != nil {
				if ctx.Err() == nil {
					log.Warn("expire unpaid orders", "err", err)
				}
				break
			}
			for _, o := range got {
				log.Info("unpaid order expired; stock returned", "order_id", o.ID, "product_id", o.ProductID, "quantity", o.Quantity)
			}
			if len(got) < batch {
				break
			}
		}
		purge(ctx, log, "old request outcomes", func(ctx context.Context, limit int) (int64, error) {
			return st.PurgeOutcomes(ctx, retention, limit)
		})
		if relay != nil {
			purge(ctx, log, "published events", func(ctx context.Context, limit int) (int64, error) {
				return relay.PurgeSent(ctx, outboxRetention, limit)
			})
		}
	}
}

// purge deletes what with del in batches of 1000 until one comes back
// short, at most 100 batches, and logs what it did.
func purge(ctx context.Context, log *slog.Logger, what string, del func(ctx context.Context, limit int) (int64, error)) {
	const batch = 1000
	for range 100 {
		n, err := del(ctx, batch)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("purge "+what, "err", err)
			}
			return
		}
		if n > 0 {
			log.Info(what+" purged", "count", n)
		}
		if n < batch {
			return
		}
	}
}
