package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/quorumlock/quorumlock/internal/failpoint"
	"github.com/quorumlock/quorumlock/internal/ordersenv"
	"github.com/quorumlock/quorumlock/orders"
	"github.com/quorumlock/quorumlock/orders/auth"
	"github.com/quorumlock/quorumlock/orders/events"
	"github.com/quorumlock/quorumlock/orders/payment"
	"github.com/quorumlock/quorumlock/orders/store"
	"github.com/quorumlock/quorumlock/orders/watchdog"
)

// config is ordersd's configuration. Every field but the secrets comes from
// a flag whose default is read from the environment variable named beside
// it. The secrets (the database URL, which carries its password, and the JWT
// secret) come only from the environment or from a file named by the same
// variable with _FILE appended: never from a flag (flags show in ps) and
// never as a flag default (flag defaults are printed by -h and on any flag
// error).
type config struct {
	listen           string          // ORDERS_LISTEN
	redisAddrs       []string        // ORDERS_REDIS_ADDRS
	databaseURL      string          // ORDERS_DATABASE_URL
	jwtSecret        string          // ORDERS_JWT_SECRET
	fallback         orders.Fallback // ORDERS_LOCK_FALLBACK
	codes            orders.Codes    // ORDERS_IDEMPOTENCY_CODES
	lockTTL          time.Duration   // ORDERS_LOCK_TTL
	lockWait         time.Duration   // ORDERS_LOCK_WAIT
	nodeTimeout      time.Duration   // ORDERS_NODE_TIMEOUT
	redisDurable     bool            // ORDERS_REDIS_DURABLE
	redisUser        string          // ORDERS_REDIS_USERNAME
	redisPassword    string          // ORDERS_REDIS_PASSWORD (a secret)
	redisTLS         *tls.Config     // ORDERS_REDIS_TLS, ORDERS_REDIS_TLS_CA_FILE
	idemTTL          time.Duration   // ORDERS_IDEMPOTENCY_TTL
	idemLease        time.Duration   // ORDERS_PROCESSING_LEASE
	reconcile        time.Duration   // ORDERS_RECONCILE_INTERVAL
	paymentURL       string          // ORDERS_PAYMENT_URL
	jwtIssuer        string          // ORDERS_JWT_ISSUER
	jwtAudience      string          // ORDERS_JWT_AUDIENCE
	jwtLifetime      time.Duration   // ORDERS_JWT_MAX_LIFETIME
	hold             time.Duration   // ORDERS_ORDER_HOLD
	expireEvery      time.Duration   // ORDERS_EXPIRE_INTERVAL
	outcomeRetention time.Duration   // ORDERS_OUTCOME_RETENTION
	payTimeout       time.Duration   // ORDERS_PAYMENT_TIMEOUT
	callbackKey      string          // ORDERS_PAYMENT_CALLBACK_SECRET (a secret)
	migrate          bool            // ORDERS_MIGRATE
	shutdownWait     time.Duration   // ORDERS_SHUTDOWN_WAIT
	invariantEvery   time.Duration   // ORDERS_INVARIANT_INTERVAL (0: the watchdog is off)
	stuckPaying      time.Duration   // ORDERS_STUCK_PAYING_AFTER
	failpoints       *failpoint.Set  // QUORUMLOCK_FAILPOINTS (only a -tags failpoints build arms them)
	logFormat        string          // ORDERS_LOG_FORMAT: text or json
	eventsAddr       string          // ORDERS_EVENTS_REDIS_ADDR (default: the first master)
	eventsStream     string          // ORDERS_EVENTS_STREAM
	eventsMaxLen     int64           // ORDERS_EVENTS_MAXLEN
	relayEvery       time.Duration   // ORDERS_RELAY_INTERVAL (0: this instance runs no relay)
	outboxRetention  time.Duration   // ORDERS_OUTBOX_RETENTION
	logLevel         slog.Level      // ORDERS_LOG_LEVEL
}

// secret returns the secret name, from the environment or from the file
// named by name_FILE (see ordersenv.Secret).
func secret(name string) (string, error) { return ordersenv.Secret(os.LookupEnv, name) }

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func envDuration(fs *flag.FlagSet, errs *[]error, p *time.Duration, name, envName string, def time.Duration, usage string) {
	d := def
	if v, ok := os.LookupEnv(envName); ok {
		parsed, err := time.ParseDuration(v)
		if err != nil {
			*errs = append(*errs, fmt.Errorf("%s=%q: %w", envName, v, err))
		}
		d = parsed
	}
	fs.DurationVar(p, name, d, usage+" ("+envName+")")
}

// parseConfig reads flags over the environment and checks the result.
// Usage and flag errors go to out.
func parseConfig(args []string, out io.Writer) (config, error) {
	var c config
	var errs []error
	fs := flag.NewFlagSet("ordersd serve", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintln(out, "usage: ordersd serve [flags]")
		fmt.Fprintln(out, "secrets, from the environment or a file (never a flag): ORDERS_DATABASE_URL or ORDERS_DATABASE_URL_FILE, ORDERS_JWT_SECRET or ORDERS_JWT_SECRET_FILE, ORDERS_PAYMENT_CALLBACK_SECRET or ORDERS_PAYMENT_CALLBACK_SECRET_FILE (optional: enables POST /payments/callback)")
		fs.PrintDefaults()
	}
	fs.StringVar(&c.listen, "listen", env("ORDERS_LISTEN", "127.0.0.1:8080"), "HTTP listen address (ORDERS_LISTEN)")
	addrs := fs.String("redis-addrs", env(ordersenv.VarRedisAddrs, ""), "comma-separated independent Redis masters, an odd number (ORDERS_REDIS_ADDRS)")
	var err error
	if c.databaseURL, err = secret(ordersenv.VarDatabaseURL); err != nil {
		errs = append(errs, err)
	}
	if c.jwtSecret, err = secret("ORDERS_JWT_SECRET"); err != nil {
		errs = append(errs, err)
	}
	if c.callbackKey, err = secret("ORDERS_PAYMENT_CALLBACK_SECRET"); err != nil {
		errs = append(errs, err)
	}
	if c.redisPassword, err = secret(ordersenv.VarRedisPassword); err != nil {
		errs = append(errs, err)
	}
	if c.failpoints, err = failpoint.FromEnv(); err != nil {
		errs = append(errs, err)
	}
	fs.StringVar(&c.redisUser, "redis-username", env(ordersenv.VarRedisUsername, ""), "Redis ACL user of every master (ORDERS_REDIS_USERNAME; the password comes from ORDERS_REDIS_PASSWORD or ORDERS_REDIS_PASSWORD_FILE)")
	tlsDefault, err := strconv.ParseBool(env(ordersenv.VarRedisTLS, "false"))
	if err != nil {
		errs = append(errs, fmt.Errorf("ORDERS_REDIS_TLS=%q: want true or false", env(ordersenv.VarRedisTLS, "")))
	}
	redisTLS := fs.Bool("redis-tls", tlsDefault, "talk TLS to the Redis masters, verifying them against the system roots or ORDERS_REDIS_TLS_CA_FILE (ORDERS_REDIS_TLS)")
	redisCA := fs.String("redis-tls-ca-file", env(ordersenv.VarRedisTLSCAFile, ""), "PEM file of the CA that signed the masters' certificates (ORDERS_REDIS_TLS_CA_FILE)")
	fs.StringVar(&c.jwtIssuer, "jwt-issuer", env("ORDERS_JWT_ISSUER", ""), "require this iss in every token (ORDERS_JWT_ISSUER; empty: not checked)")
	fs.StringVar(&c.jwtAudience, "jwt-audience", env("ORDERS_JWT_AUDIENCE", ""), "require this aud in every token (ORDERS_JWT_AUDIENCE; empty: not checked)")
	envDuration(fs, &errs, &c.jwtLifetime, "jwt-max-lifetime", "ORDERS_JWT_MAX_LIFETIME", auth.DefaultMaxLifetime, "refuse tokens whose exp is further away than this")
	fs.StringVar(&c.paymentURL, "payment-url", env("ORDERS_PAYMENT_URL", ""), "base URL of the payment provider, e.g. http://127.0.0.1:8090 for fakepay (ORDERS_PAYMENT_URL)")
	fallback := fs.String("lock-fallback", env("ORDERS_LOCK_FALLBACK", "db"), "when the lock quorum is lost: db or reject (ORDERS_LOCK_FALLBACK)")
	codes := fs.String("idempotency-codes", env("ORDERS_IDEMPOTENCY_CODES", "seed"), "status codes of the idempotency conflicts: seed (202 while in flight, 409 for a reused key) or ietf (409 while in flight, 422 for a reused key) (ORDERS_IDEMPOTENCY_CODES)")
	envDuration(fs, &errs, &c.lockTTL, "lock-ttl", ordersenv.VarLockTTL, ordersenv.DefaultLockTTL, "stock lock TTL, which is also the restart guard's window")
	envDuration(fs, &errs, &c.lockWait, "lock-wait", "ORDERS_LOCK_WAIT", 2*time.Second, "longest wait for the stock lock")
	envDuration(fs, &errs, &c.nodeTimeout, "node-timeout", ordersenv.VarNodeTimeout, 0, "per-node Redis timeout of the lock (0: the lock's default)")
	envDuration(fs, &errs, &c.idemTTL, "idempotency-ttl", "ORDERS_IDEMPOTENCY_TTL", 24*time.Hour, "how long an idempotency record is kept in Redis")
	envDuration(fs, &errs, &c.idemLease, "processing-lease", "ORDERS_PROCESSING_LEASE", 10*time.Second, "how long a request may process before a retry may take it over")
	envDuration(fs, &errs, &c.reconcile, "reconcile-interval", "ORDERS_RECONCILE_INTERVAL", 5*time.Second, "how often payments stuck in PAYING are settled")
	envDuration(fs, &errs, &c.hold, "order-hold", "ORDERS_ORDER_HOLD", store.DefaultHold, "how long an unpaid order keeps its stock before it is cancelled and the stock returned")
	envDuration(fs, &errs, &c.outcomeRetention, "outcome-retention", "ORDERS_OUTCOME_RETENTION", 7*24*time.Hour, "how long a saved out-of-stock answer is kept in Postgres for replays; at least ORDERS_IDEMPOTENCY_TTL")
	envDuration(fs, &errs, &c.expireEvery, "expire-interval", "ORDERS_EXPIRE_INTERVAL", 30*time.Second, "how often unpaid orders past the hold are expired")
	envDuration(fs, &errs, &c.payTimeout, "payment-timeout", "ORDERS_PAYMENT_TIMEOUT", 10*time.Second, "bound on one charge or query at the provider, retries included; the reconciler re-sends a charge only once its attempt is older")
	envDuration(fs, &errs, &c.invariantEvery, "invariant-interval", "ORDERS_INVARIANT_INTERVAL", watchdog.DefaultInterval, "how often the invariant watchdog checks the database and sets orders_invariant_violations; 0 turns it off")
	envDuration(fs, &errs, &c.stuckPaying, "stuck-paying-after", "ORDERS_STUCK_PAYING_AFTER", watchdog.DefaultStuckPayingAfter, "how long an order may stay PAYING before the watchdog's stuck_paying check counts it")
	migrateDefault, err := strconv.ParseBool(env("ORDERS_MIGRATE", "true"))
	if err != nil {
		errs = append(errs, fmt.Errorf("ORDERS_MIGRATE=%q: want true or false", env("ORDERS_MIGRATE", "")))
	}
	migrate := fs.Bool("migrate", migrateDefault, "run the migrations on start (ORDERS_MIGRATE)")
	durableDefault, err := strconv.ParseBool(env(ordersenv.VarRedisDurable, "false"))
	if err != nil {
		errs = append(errs, fmt.Errorf("ORDERS_REDIS_DURABLE=%q: want true or false", env(ordersenv.VarRedisDurable, "")))
	}
	durable := fs.Bool("redis-durable", durableDefault, "the Redis masters run appendonly yes with appendfsync always: a restarted node that kept its data votes at once (ORDERS_REDIS_DURABLE)")
	envDuration(fs, &errs, &c.shutdownWait, "shutdown-wait", "ORDERS_SHUTDOWN_WAIT", 0, "how long in-flight requests may finish on shutdown; 0: as long as the longest handler can take (the processing lease, or a payment call plus its settlement), plus 5s")
	fs.StringVar(&c.eventsAddr, "events-redis-addr", env("ORDERS_EVENTS_REDIS_ADDR", ""), "the Redis server of the order event stream, HOST:PORT, with the masters' credentials and TLS (ORDERS_EVENTS_REDIS_ADDR; empty: the first of ORDERS_REDIS_ADDRS)")
	fs.StringVar(&c.eventsStream, "events-stream", env("ORDERS_EVENTS_STREAM", events.DefaultStream), "the Redis Stream the outbox relay publishes to (ORDERS_EVENTS_STREAM)")
	maxLen, err := strconv.ParseInt(env("ORDERS_EVENTS_MAXLEN", strconv.Itoa(events.DefaultMaxLen)), 10, 64)
	if err != nil || maxLen < 1 {
		errs = append(errs, fmt.Errorf("ORDERS_EVENTS_MAXLEN=%q: want a positive number of entries", env("ORDERS_EVENTS_MAXLEN", "")))
	}
	fs.Int64Var(&c.eventsMaxLen, "events-maxlen", maxLen, "entries the event stream keeps, roughly (XADD MAXLEN ~) (ORDERS_EVENTS_MAXLEN)")
	envDuration(fs, &errs, &c.relayEvery, "relay-interval", "ORDERS_RELAY_INTERVAL", events.DefaultInterval, "how often the outbox relay looks for unsent events when it has none; 0 runs no relay on this instance")
	envDuration(fs, &errs, &c.outboxRetention, "outbox-retention", "ORDERS_OUTBOX_RETENTION", 7*24*time.Hour, "how long published events stay in the outbox table")
	logFormat := fs.String("log-format", env("ORDERS_LOG_FORMAT", "text"), "log format: text or json (ORDERS_LOG_FORMAT)")
	logLevel := fs.String("log-level", env("ORDERS_LOG_LEVEL", "info"), "least severe level logged: debug, info, warn or error; info logs one line per order request (ORDERS_LOG_LEVEL)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch *logFormat {
	case "text", "json":
		c.logFormat = *logFormat
	default:
		errs = append(errs, fmt.Errorf("ORDERS_LOG_FORMAT %q: want text or json", *logFormat))
	}
	if err := c.logLevel.UnmarshalText([]byte(*logLevel)); err != nil {
		errs = append(errs, fmt.Errorf("ORDERS_LOG_LEVEL %q: want debug, info, warn or error", *logLevel))
	}
	c.migrate = *migrate
	if *redisTLS || *redisCA != "" {
		tc, err := ordersenv.RedisTLS(*redisCA)
		if err != nil {
			errs = append(errs, err)
		}
		c.redisTLS = tc
	}
	if c.shutdownWait == 0 {
		c.shutdownWait = c.longestHandler() + 5*time.Second
	}
	c.redisDurable = *durable
	list, err := ordersenv.RedisAddrs(*addrs)
	errs = append(errs, err)
	c.redisAddrs = list
	if c.eventsAddr == "" && len(list) > 0 {
		c.eventsAddr = list[0]
	}
	f, err := orders.ParseFallback(*fallback)
	errs = append(errs, err)
	c.fallback = f
	cs, err := orders.ParseCodes(*codes)
	if err != nil {
		err = fmt.Errorf("ORDERS_IDEMPOTENCY_CODES: %w", err)
	}
	errs = append(errs, err)
	c.codes = cs
	errs = append(errs, c.check())
	return c, errors.Join(errs...)
}

// logger is the service's logger on w, in the configured format and level.
func (c config) logger(w io.Writer) *slog.Logger {
	o := &slog.HandlerOptions{Level: c.logLevel}
	if c.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}

// longestHandler bounds how long one request can run: a create request
// within its processing lease, or a pay request: the provider call plus the
// settlement (payment.DefaultSettleTimeout).
func (c config) longestHandler() time.Duration {
	return max(c.idemLease, c.payTimeout+payment.DefaultSettleTimeout)
}

func (c config) check() error {
	var errs []error
	if c.shutdownWait < c.longestHandler() {
		errs = append(errs, fmt.Errorf("ORDERS_SHUTDOWN_WAIT (%v) is shorter than the longest request can take (%v): a shutdown would cut requests off", c.shutdownWait, c.longestHandler()))
	}
	if _, _, err := net.SplitHostPort(c.listen); err != nil {
		errs = append(errs, fmt.Errorf("ORDERS_LISTEN %q: %w", c.listen, err))
	}
	if c.databaseURL == "" {
		errs = append(errs, errors.New("ORDERS_DATABASE_URL is empty"))
	}
	if c.paymentURL == "" {
		errs = append(errs, errors.New("ORDERS_PAYMENT_URL is empty: give the payment provider's base URL (cmd/fakepay for development)"))
	} else if u, err := url.Parse(c.paymentURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("ORDERS_PAYMENT_URL %q: want an http or https URL with a host", c.paymentURL))
	}
	if c.callbackKey != "" && len(c.callbackKey) < 16 {
		errs = append(errs, errors.New("ORDERS_PAYMENT_CALLBACK_SECRET must be at least 16 bytes"))
	}
	if len(c.jwtSecret) < auth.MinSecretLen {
		errs = append(errs, fmt.Errorf("ORDERS_JWT_SECRET must be at least %d bytes", auth.MinSecretLen))
	}
	for name, d := range map[string]time.Duration{
		ordersenv.VarLockTTL: c.lockTTL, "ORDERS_LOCK_WAIT": c.lockWait, "ORDERS_IDEMPOTENCY_TTL": c.idemTTL,
		"ORDERS_PROCESSING_LEASE": c.idemLease, "ORDERS_RECONCILE_INTERVAL": c.reconcile, "ORDERS_PAYMENT_TIMEOUT": c.payTimeout,
		"ORDERS_ORDER_HOLD": c.hold, "ORDERS_JWT_MAX_LIFETIME": c.jwtLifetime, "ORDERS_EXPIRE_INTERVAL": c.expireEvery,
	} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %v", name, d))
		}
	}
	if c.eventsAddr != "" {
		if _, _, err := net.SplitHostPort(c.eventsAddr); err != nil {
			errs = append(errs, fmt.Errorf("ORDERS_EVENTS_REDIS_ADDR %q: %w", c.eventsAddr, err))
		}
	}
	if c.eventsStream == "" {
		errs = append(errs, errors.New("ORDERS_EVENTS_STREAM is empty"))
	}
	if c.eventsMaxLen < 1 {
		errs = append(errs, fmt.Errorf("ORDERS_EVENTS_MAXLEN must be positive, got %d", c.eventsMaxLen))
	}
	if c.relayEvery < 0 {
		errs = append(errs, fmt.Errorf("ORDERS_RELAY_INTERVAL must not be negative (0 runs no relay), got %v", c.relayEvery))
	}
	if c.outboxRetention <= 0 {
		errs = append(errs, fmt.Errorf("ORDERS_OUTBOX_RETENTION must be positive, got %v", c.outboxRetention))
	}
	if c.invariantEvery < 0 {
		errs = append(errs, fmt.Errorf("ORDERS_INVARIANT_INTERVAL must not be negative (0 turns the watchdog off), got %v", c.invariantEvery))
	}
	if c.stuckPaying <= 0 {
		errs = append(errs, fmt.Errorf("ORDERS_STUCK_PAYING_AFTER must be positive, got %v", c.stuckPaying))
	} else if settle := 2 * (c.payTimeout + c.reconcile); c.invariantEvery > 0 && c.stuckPaying <= settle {
		errs = append(errs, fmt.Errorf("ORDERS_STUCK_PAYING_AFTER (%v) must exceed twice ORDERS_PAYMENT_TIMEOUT plus ORDERS_RECONCILE_INTERVAL (%v): the reconciler may need that long to settle a healthy payment whose reply was lost, and stuck_paying would page for it", c.stuckPaying, settle))
	}
	if c.nodeTimeout < 0 {
		errs = append(errs, fmt.Errorf("ORDERS_NODE_TIMEOUT must not be negative, got %v", c.nodeTimeout))
	}
	if c.idemLease <= c.lockWait+time.Second {
		errs = append(errs, fmt.Errorf("ORDERS_PROCESSING_LEASE (%v) must exceed ORDERS_LOCK_WAIT (%v) by more than 1s, or retries take over requests that are still waiting for the lock", c.idemLease, c.lockWait))
	}
	if c.outcomeRetention < c.idemTTL {
		errs = append(errs, fmt.Errorf("ORDERS_OUTCOME_RETENTION (%v) must be at least ORDERS_IDEMPOTENCY_TTL (%v): Postgres answers replays after the Redis record is gone", c.outcomeRetention, c.idemTTL))
	}
	if c.idemLease >= c.idemTTL {
		errs = append(errs, fmt.Errorf("ORDERS_PROCESSING_LEASE (%v) must be shorter than ORDERS_IDEMPOTENCY_TTL (%v)", c.idemLease, c.idemTTL))
	}
	return errors.Join(errs...)
}
