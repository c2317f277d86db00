package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/fencing"
	"github.com/quorumlock/quorumlock/lease"
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

// deps is what the daemon runs on: the connections, the packages wired
// over them and the service.
type deps struct {
	log      *slog.Logger
	reg      *prometheus.Registry
	pool     *pgxpool.Pool
	hosts    *hostPreference             // the pool's preferred host, which the primary watch may clear
	clients  []redis.UniversalClient     // the Redis masters: the lock's nodes and the idempotency records
	lock     lease.Locker                // nil with ORDERS_LOCK=off
	etcdUp   func(context.Context) error // the etcd backend's readiness probe, else nil
	store    *store.Store
	payments *payment.Service
	verifier *auth.Verifier
	dog      *watchdog.Watchdog // nil with ORDERS_INVARIANT_INTERVAL=0
	relay    *events.Relay      // nil with ORDERS_RELAY_INTERVAL=0
	svc      *orders.Service
}

// cleanups are the closes of what dependencies opened, run last first.
type cleanups []func()

func (c *cleanups) add(f func()) { *c = append(*c, f) }

func (c cleanups) run() {
	for i := len(c) - 1; i >= 0; i-- {
		c[i]()
	}
}

// dependencies opens the database pool (migrating it first when
// ORDERS_MIGRATE is on), the Redis clients, the quorum lock (unless
// ORDERS_LOCK=off), the idempotency store, the order store, payments, the
// token verifier, the metrics, the watchdog, the relay and the service. The
// returned cleanup closes what was opened, last first; on an error
// everything is already closed and cleanup is nil.
func dependencies(ctx context.Context, cfg config, log *slog.Logger, reg *prometheus.Registry) (_ *deps, cleanup func(), err error) {
	var closers cleanups
	defer func() {
		if err != nil {
			closers.run()
		}
	}()
	d := &deps{log: log, reg: reg}
	if d.pool, d.hosts, err = openDatabase(ctx, cfg); err != nil {
		return nil, nil, err
	}
	closers.add(d.pool.Close)
	d.clients = openRedis(cfg)
	closers.add(func() { closeAll(d.clients) })
	if err = d.openLock(cfg, &closers); err != nil {
		return nil, nil, err
	}
	if d.store, err = store.New(d.pool, store.WithFailpoints(cfg.failpoints)); err != nil {
		return nil, nil, fmt.Errorf("store: %w", err)
	}
	if d.payments, err = newPayments(cfg, d.store); err != nil {
		return nil, nil, err
	}
	if d.verifier, err = newVerifier(cfg); err != nil {
		return nil, nil, err
	}
	if d.dog, err = newWatchdog(cfg, d.pool, log, reg); err != nil {
		return nil, nil, err
	}
	if d.relay, err = newRelay(cfg, d.pool, log, reg, &closers); err != nil {
		return nil, nil, err
	}
	if d.svc, err = newService(cfg, d); err != nil {
		return nil, nil, err
	}
	return d, closers.run, nil
}

// openDatabase runs the migrations when configured to, and opens the pool.
// The URL gets the defaults of withDBDefaults: with several hosts, it
// connects to the one that takes writes.
func openDatabase(ctx context.Context, cfg config) (*pgxpool.Pool, *hostPreference, error) {
	url, err := withDBDefaults(cfg.databaseURL)
	if err != nil {
		return nil, nil, err
	}
	if cfg.migrate {
		if _, err := store.MigrateDSN(ctx, url); err != nil {
			return nil, nil, fmt.Errorf("migrate: %w", err)
		}
	}
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres: %w", errors.New("ORDERS_DATABASE_URL cannot be parsed (its text is not shown: it may hold a password)"))
	}
	pref := &hostPreference{}
	pcfg.BeforeConnect, pcfg.AfterConnect = pref.beforeConnect, pref.afterConnect
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres: %w", err)
	}
	return pool, pref, nil
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

// openRedis returns a client per master (no connection is made yet).
func openRedis(cfg config) []redis.UniversalClient {
	clients := make([]redis.UniversalClient, len(cfg.redisAddrs))
	for i, a := range cfg.redisAddrs {
		clients[i] = redis.NewClient(redisOptions(a, cfg))
	}
	return clients
}

func closeAll(clients []redis.UniversalClient) {
	for _, c := range clients {
		_ = c.Close()
	}
}

// openLock opens the stock lock of ORDERS_LOCK_BACKEND (none with
// ORDERS_LOCK=off), its fences reserved in Postgres and its metrics, and
// adds its closes to closers.
func (d *deps) openLock(cfg config, closers *cleanups) error {
	if !cfg.useLock {
		return nil
	}
	// Leases carry fences reserved in Postgres, on either backend; the
	// order transaction takes each in the commit that writes the stock.
	fences, err := fencing.NewReserver(d.pool)
	if err != nil {
		return fmt.Errorf("fence reserver: %w", err)
	}
	obs, err := quorumprom.New(d.reg)
	if err != nil {
		return fmt.Errorf("lock metrics: %w", err)
	}
	if cfg.lockBackend == "etcd" {
		return d.openEtcdLock(cfg, fences, obs, closers)
	}
	opts := []quorum.Option{quorum.WithTTL(cfg.lockTTL), quorum.WithMaxWait(cfg.lockWait),
		quorum.WithFencer(fences), quorum.WithObserver(obs)}
	if cfg.nodeTimeout > 0 {
		opts = append(opts, quorum.WithNodeTimeout(cfg.nodeTimeout))
	}
	if cfg.redisDurable {
		opts = append(opts, quorum.WithDurableNodes(true))
	}
	locker, err := quorum.New(d.clients, opts...)
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	closers.add(func() { _ = locker.Close() })
	d.lock = locker
	return nil
}

// newPayments returns the payment service over the provider at
// ORDERS_PAYMENT_URL.
func newPayments(cfg config, st *store.Store) (*payment.Service, error) {
	provider, err := payment.NewHTTPProvider(cfg.paymentURL, payment.WithAttemptTimeout(min(5*time.Second, cfg.payTimeout)))
	if err != nil {
		return nil, fmt.Errorf("payments: %w", err)
	}
	payments, err := payment.NewService(st, provider, payment.WithCallTimeout(cfg.payTimeout), payment.WithFailpoints(cfg.failpoints))
	if err != nil {
		return nil, fmt.Errorf("payments: %w", err)
	}
	return payments, nil
}

// newVerifier returns the bearer token verifier.
func newVerifier(cfg config) (*auth.Verifier, error) {
	opts := []auth.Option{auth.WithMaxLifetime(cfg.jwtLifetime)}
	if cfg.jwtIssuer != "" {
		opts = append(opts, auth.WithIssuer(cfg.jwtIssuer))
	}
	if cfg.jwtAudience != "" {
		opts = append(opts, auth.WithAudience(cfg.jwtAudience))
	}
	v, err := auth.NewVerifier([]byte(cfg.jwtSecret), opts...)
	if err != nil {
		return nil, fmt.Errorf("tokens: %w", err)
	}
	return v, nil
}

// newWatchdog returns the invariant watchdog, which feeds
// orders_invariant_violations (the correctness alerts read it), or nil with
// ORDERS_INVARIANT_INTERVAL=0: then this instance exports no such series.
func newWatchdog(cfg config, pool *pgxpool.Pool, log *slog.Logger, reg prometheus.Registerer) (*watchdog.Watchdog, error) {
	if cfg.invariantEvery <= 0 {
		log.Info("invariant watchdog off (ORDERS_INVARIANT_INTERVAL=0): this instance exports no orders_invariant_violations")
		return nil, nil
	}
	dog, err := watchdog.New(pool, watchdog.WithInterval(cfg.invariantEvery),
		watchdog.WithStuckPayingAfter(cfg.stuckPaying), watchdog.WithLogger(log), watchdog.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("watchdog: %w", err)
	}
	return dog, nil
}

// newRelay returns the outbox relay, or nil with ORDERS_RELAY_INTERVAL=0.
// Every instance may run one; they share the rows (SKIP LOCKED). Its Redis
// client's close goes to closers.
func newRelay(cfg config, pool *pgxpool.Pool, log *slog.Logger, reg prometheus.Registerer, closers *cleanups) (*events.Relay, error) {
	if cfg.relayEvery <= 0 {
		log.Info("outbox relay off (ORDERS_RELAY_INTERVAL=0): this instance publishes no order events")
		return nil, nil
	}
	evMetrics, err := events.NewMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	evRedis := redis.NewClient(redisOptions(cfg.eventsAddr, cfg))
	closers.add(func() { _ = evRedis.Close() })
	relay, err := events.NewRelay(pool, evRedis, events.WithStream(cfg.eventsStream), events.WithMaxLen(cfg.eventsMaxLen),
		events.WithInterval(cfg.relayEvery), events.WithMetrics(evMetrics), events.WithLogger(log), events.WithFailpoints(cfg.failpoints))
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	return relay, nil
}

// newService returns the order service: its idempotency claims on the
// masters, the stock lock when there is one, the queues' bounds, payments
// and metrics.
func newService(cfg config, d *deps) (*orders.Service, error) {
	claims, err := idem.New(d.clients, idem.WithTTL(cfg.idemTTL), idem.WithLease(cfg.idemLease))
	if err != nil {
		return nil, fmt.Errorf("idempotency: %w", err)
	}
	metrics, err := orders.NewMetrics(d.reg)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	opts := []orders.Option{orders.WithIdempotency(claims), orders.WithFallback(cfg.fallback),
		orders.WithIdempotencyCodes(cfg.codes), orders.WithPayments(d.payments),
		orders.WithBatchLimit(cfg.batchLimit), orders.WithQueue(cfg.queueLimit, cfg.queueWait),
		orders.WithSoldOutRecheck(cfg.soldOutRecheck),
		orders.WithMetrics(metrics), orders.WithLogger(d.log), orders.WithFailpoints(cfg.failpoints)}
	if d.lock != nil {
		opts = append(opts, orders.WithLocker(d.lock), orders.WithLockRule(cfg.lockRule))
	}
	if cfg.callbackKey != "" {
		opts = append(opts, orders.WithPaymentCallbacks([]byte(cfg.callbackKey), 0))
	}
	svc, err := orders.New(d.store, opts...)
	if err != nil {
		return nil, fmt.Errorf("orders: %w", err)
	}
	return svc, nil
}
