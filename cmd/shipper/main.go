// Command shipper is the sample consumer of the order events: it reserves
// one shipment for every paid order, once, however often the stream
// delivers the order's order.paid event.
//
// It reads the stream that ordersd's outbox relay publishes to
// (ORDERS_EVENTS_STREAM on ORDERS_EVENTS_REDIS_ADDR) as the member
// SHIPPER_NAME of the consumer group SHIPPER_GROUP, in the exact mode of
// orders/events ([events.NewExact]): a Redis claim per event keeps the
// group's consumers off one event at a time, and the effect, an INSERT
// INTO shipments, runs in the Postgres transaction that also inserts the
// event's UNIQUE consumed_events row. A repeat, whether the relay sent the
// event twice, a consumer died before its XACK, or the Redis record of the
// event is gone, finds that row and reserves nothing. The other event
// types (order.created, order.cancelled) have no effect here; they are
// recorded consumed and acknowledged all the same.
//
// Run as many shippers as needed, each with its own SHIPPER_NAME: they
// share the group's messages, and one takes over the messages another left
// pending for SHIPPER_CLAIM_IDLE (it died, or it is stuck).
//
// The configuration comes from the environment only; `shipper -h` lists
// the variables. The database and the Redis settings are ordersd's
// (ORDERS_DATABASE_URL or ORDERS_DATABASE_URL_FILE, ORDERS_REDIS_USERNAME,
// ORDERS_REDIS_PASSWORD or _FILE, ORDERS_REDIS_TLS, ORDERS_REDIS_TLS_CA_FILE,
// ORDERS_LOG_FORMAT), read by the same rules (internal/ordersenv). The
// shipper never migrates the database: ordersd does, and the shipper
// refuses to start on a database without the consumed_events and shipments
// tables.
//
// SIGTERM or SIGINT stop it: the read in progress ends within its block
// time (at most a second), an event being handled either commits and is
// acknowledged or is rolled back and left pending, to be delivered again
// (to this name's next run, or to another shipper after
// SHIPPER_CLAIM_IDLE), and the process exits 0.
//
// Endpoints, on SHIPPER_LISTEN: /metrics (the events_* metrics of
// orders/events, and the Go runtime's) and /healthz (the process is up).
//
// A build with -tags failpoints arms QUORUMLOCK_FAILPOINTS=after-consume=kill
// or =stop (see internal/failpoint), for the failure drills of
// integration/events_test.go.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/failpoint"
	"github.com/quorumlock/quorumlock/internal/ordersenv"
	"github.com/quorumlock/quorumlock/orders/events"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "shipper:", err)
		os.Exit(1)
	}
}

// run parses the configuration from env and serves until ctx ends.
func run(ctx context.Context, args []string, env ordersenv.Lookup, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		if len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			_, err := io.WriteString(stdout, usage)
			return err
		}
		return fmt.Errorf("unexpected arguments %q: the shipper is configured by the environment (see shipper -h)", args)
	}
	cfg, err := parseConfig(env)
	fps, fpErr := failpoint.FromEnv()
	if err = errors.Join(err, fpErr); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	return serve(ctx, cfg, fps, cfg.logger(stderr))
}

// redisOptions are the go-redis options of the events client, as ordersd
// sets them: calls bounded by their context, no automatic retries, short
// socket timeouts (a blocking read gets its block time on top).
func redisOptions(cfg config) *redis.Options {
	return &redis.Options{
		Addr: cfg.eventsAddr, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: 8, DisableIdentity: true,
		Username: cfg.redisUser, Password: cfg.redisPassword.reveal(), TLSConfig: cfg.redisTLS,
	}
}

// reserve is the shipper's effect: on order.paid, one shipments row per
// line of the order, inserted in tx, the consumer's transaction, which also records the event
// consumed. Every other event type is a no-op. An order.paid whose payload
// does not decode fails, so the event stays pending and is delivered again
// rather than dropped: a paid order is never silently left unshipped.
func reserve(by string) events.TxHandler {
	return func(ctx context.Context, tx pgx.Tx, e events.Event) error {
		if e.Type != events.OrderPaid {
			return nil
		}
		o, err := e.Order()
		if err != nil {
			return err
		}
		lines := o.OrderLines()
		if len(lines) == 0 {
			return fmt.Errorf("%w: event %s: no lines", events.ErrMalformed, e.ID)
		}
		for _, l := range lines {
			if l.ProductID == "" || l.Quantity <= 0 {
				return fmt.Errorf("%w: event %s: product %q, quantity %d", events.ErrMalformed, e.ID, l.ProductID, l.Quantity)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO shipments (order_id, event_id, product_id, quantity, reserved_by)
VALUES ($1, $2, $3, $4, $5)`, e.OrderID, e.ID, l.ProductID, l.Quantity, by); err != nil {
				return fmt.Errorf("reserve the shipment of %s: %w", e.OrderID, err)
			}
		}
		return nil
	}
}

// checkSchema makes sure ordersd migrated the database far enough for the
// shipper: it needs consumed_events and shipments (migration 00006).
func checkSchema(ctx context.Context, pool *pgxpool.Pool) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var consumed, shipments bool
	err := pool.QueryRow(ctx, `SELECT to_regclass('consumed_events') IS NOT NULL, to_regclass('shipments') IS NOT NULL`).Scan(&consumed, &shipments)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	if !consumed || !shipments {
		return errors.New("postgres: the database has no consumed_events or shipments table: run ordersd migrate (or start ordersd, which migrates) first; the shipper does not migrate")
	}
	return nil
}

// serve consumes until ctx ends, and serves /metrics and /healthz
// meanwhile. The line "shipper listening" carries the bound address.
func serve(ctx context.Context, cfg config, fps *failpoint.Set, log *slog.Logger) error {
	if fps.Ignored() {
		log.Warn(failpoint.EnvVar + " is set but this build has no failpoints (build with -tags failpoints): ignored")
	}
	if fps.Armed() {
		log.Warn("failpoints armed: this process will crash or freeze on purpose", "failpoints", fps.String())
	}
	pool, err := pgxpool.New(ctx, cfg.databaseURL.reveal())
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer pool.Close()
	if err := checkSchema(ctx, pool); err != nil {
		return err
	}
	rdb := redis.NewClient(redisOptions(cfg))
	defer func() { _ = rdb.Close() }()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = rdb.Ping(pctx).Err()
	cancel()
	if err != nil {
		return fmt.Errorf("redis %s (%s): %w", cfg.eventsAddr, varEventsAddr, err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	consumer, err := newConsumer(cfg, rdb, pool, reg, fps, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("%s: %w", varListen, err)
	}
	srv := newServer(reg)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("shipper listening", "addr", ln.Addr().String(), "redis", cfg.eventsAddr, "stream", cfg.stream,
		"group", cfg.group, "name", cfg.name, "claim_idle", cfg.claimIdle, "lease", cfg.lease)
	return consumeUntilDone(ctx, consumer, srv, served, log)
}

// newConsumer is the exact-mode consumer of cfg's stream, whose effect is
// reserve, with its metrics registered on reg.
func newConsumer(cfg config, rdb *redis.Client, pool *pgxpool.Pool, reg prometheus.Registerer, fps *failpoint.Set, log *slog.Logger) (*events.Consumer, error) {
	metrics, err := events.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	consumer, err := events.NewExact(rdb, pool, cfg.group, cfg.name, reserve(cfg.name),
		events.WithStream(cfg.stream), events.WithClaimIdle(cfg.claimIdle), events.WithBlock(cfg.block()),
		events.WithLease(cfg.lease), events.WithWindow(cfg.window), events.WithMetrics(metrics),
		events.WithLogger(log), events.WithFailpoints(fps))
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	return consumer, nil
}

// newServer is the HTTP server of /healthz and of /metrics from reg.
func newServer(reg *prometheus.Registry) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute}
}

// consumeUntilDone runs consumer until ctx ends, the consumer stops or
// the server (whose Serve result comes on served) fails, then stops both
// and returns the first error. The consumer stops with ctx; it also
// returns early when the group cannot be created, and then the shipper
// stops too.
func consumeUntilDone(ctx context.Context, consumer *events.Consumer, srv *http.Server, served <-chan error, log *slog.Logger) error {
	cctx, stopConsumer := context.WithCancel(ctx)
	defer stopConsumer()
	consumed := make(chan error, 1)
	go func() { consumed <- consumer.Run(cctx) }()

	var runErr error
	serverDone := false
	select {
	case runErr = <-consumed:
		if runErr == nil && ctx.Err() == nil {
			runErr = errors.New("the consumer stopped")
		}
	case runErr = <-served:
		serverDone = true
		stopConsumer()
		<-consumed
	case <-ctx.Done():
		log.Info("shipper shutting down")
		<-consumed
	}
	if !serverDone {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := srv.Shutdown(sctx); err != nil {
			_ = srv.Close()
		}
		cancel()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) && runErr == nil {
			runErr = err
		}
	}
	if runErr != nil {
		return runErr
	}
	log.Info("shipper stopped")
	return nil
}
