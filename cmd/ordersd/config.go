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
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

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
	useLock          bool            // ORDERS_LOCK: auto or on (true), or off (false: Postgres arbitrates alone)
	lockRule         orders.LockRule // ORDERS_LOCK: auto (contended batches) or on (every batch)
	lockBackend      string          // ORDERS_LOCK_BACKEND: redlock or etcd
	etcdEndpoints    []string        // ORDERS_ETCD_ENDPOINTS (the etcd backend)
	fallback         orders.Fallback // ORDERS_LOCK_FALLBACK
	codes            orders.Codes    // ORDERS_IDEMPOTENCY_CODES
	lockTTL          time.Duration   // ORDERS_LOCK_TTL
	lockWait         time.Duration   // ORDERS_LOCK_WAIT
	nodeTimeout      time.Duration   // ORDERS_NODE_TIMEOUT
	batchLimit       int             // ORDERS_BATCH_LIMIT
	queueLimit       int             // ORDERS_QUEUE_LIMIT
	queueWait        time.Duration   // ORDERS_QUEUE_WAIT (default: twice ORDERS_LOCK_WAIT)
	soldOutRecheck   time.Duration   // ORDERS_SOLDOUT_RECHECK
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
	pghaMonitorURL   string          // ORDERS_PGHA_MONITOR_URL (a secret, optional: the pg_auto_failover monitor, for its metrics)
}

// rawFlags are the flags read as text (or set-or-not) and turned into
// config fields once every flag is parsed.
type rawFlags struct {
	addrs, redisCA, lock, fallback, codes, logFormat, logLevel *string
	backend, etcd                                              *string
	redisTLS                                                   *bool
	queueWait                                                  *laterDuration
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

// envBool is a true/false flag whose default comes from envName.
func envBool(fs *flag.FlagSet, errs *[]error, p *bool, name, envName string, def bool, usage string) {
	b := def
	if v, ok := os.LookupEnv(envName); ok {
		parsed, err := strconv.ParseBool(v)
		if err != nil {
			*errs = append(*errs, fmt.Errorf("%s=%q: want true or false", envName, v))
		}
		b = parsed
	}
	fs.BoolVar(p, name, b, usage+" ("+envName+")")
}

// envInt is a whole-number flag whose default comes from envName.
func envInt(fs *flag.FlagSet, errs *[]error, p *int, name, envName string, def int, usage string) {
	n := def
	if v, ok := os.LookupEnv(envName); ok {
		parsed, err := strconv.Atoi(v)
		if err != nil {
			*errs = append(*errs, fmt.Errorf("%s=%q: want a whole number", envName, v))
		}
		n = parsed
	}
	fs.IntVar(p, name, n, usage+" ("+envName+")")
}

// laterDuration is a duration flag whose default is worked out from other
// settings once every flag is parsed: it remembers whether the environment
// or the command line set it. -h prints no default for it; its usage says
// what the default is.
type laterDuration struct {
	d   time.Duration
	set bool
}

// String is the value, or "" while unset.
func (l *laterDuration) String() string {
	if l == nil || !l.set {
		return ""
	}
	return l.d.String()
}

// Set parses a duration.
func (l *laterDuration) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	l.d, l.set = d, true
	return nil
}

// envLaterDuration is a laterDuration flag, set from envName when that is.
func envLaterDuration(fs *flag.FlagSet, errs *[]error, name, envName, usage string) *laterDuration {
	l := &laterDuration{}
	if v, ok := os.LookupEnv(envName); ok {
		if err := l.Set(v); err != nil {
			*errs = append(*errs, fmt.Errorf("%s=%q: %w", envName, v, err))
		}
	}
	fs.Var(l, name, usage+" ("+envName+")")
	return l
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
		fmt.Fprintln(out, "secrets, from the environment or a file (never a flag): ORDERS_DATABASE_URL or ORDERS_DATABASE_URL_FILE, ORDERS_JWT_SECRET or ORDERS_JWT_SECRET_FILE, ORDERS_PAYMENT_CALLBACK_SECRET or ORDERS_PAYMENT_CALLBACK_SECRET_FILE (optional: enables POST /payments/callback), ORDERS_PGHA_MONITOR_URL or ORDERS_PGHA_MONITOR_URL_FILE (optional: the pg_auto_failover monitor, read for the orders_pgha_* metrics)")
		fs.PrintDefaults()
	}
	c.readSecrets(&errs)
	var raw rawFlags
	c.bindServerFlags(fs, &errs, &raw)
	c.bindLockFlags(fs, &errs, &raw)
	c.bindRequestFlags(fs, &errs, &raw)
	c.bindBackgroundFlags(fs, &errs)
	c.bindProcessFlags(fs, &errs, &raw)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	errs = append(errs, c.resolve(raw), c.check())
	return c, errors.Join(errs...)
}

// readSecrets reads the secrets and the failpoints from the environment.
func (c *config) readSecrets(errs *[]error) {
	var err error
	if c.databaseURL, err = secret(ordersenv.VarDatabaseURL); err != nil {
		*errs = append(*errs, err)
	}
	if c.jwtSecret, err = secret("ORDERS_JWT_SECRET"); err != nil {
		*errs = append(*errs, err)
	}
	if c.callbackKey, err = secret("ORDERS_PAYMENT_CALLBACK_SECRET"); err != nil {
		*errs = append(*errs, err)
	}
	if c.redisPassword, err = secret(ordersenv.VarRedisPassword); err != nil {
		*errs = append(*errs, err)
	}
	if c.pghaMonitorURL, err = secret(varPGHAMonitorURL); err != nil {
		*errs = append(*errs, err)
	}
	if c.failpoints, err = failpoint.FromEnv(); err != nil {
		*errs = append(*errs, err)
	}
}

// bindServerFlags: where the daemon listens and how it reaches the Redis
// masters.
func (c *config) bindServerFlags(fs *flag.FlagSet, errs *[]error, raw *rawFlags) {
	fs.StringVar(&c.listen, "listen", env("ORDERS_LISTEN", "127.0.0.1:8080"), "HTTP listen address (ORDERS_LISTEN)")
	raw.addrs = fs.String("redis-addrs", env(ordersenv.VarRedisAddrs, ""), "comma-separated independent Redis masters, an odd number (ORDERS_REDIS_ADDRS)")
	fs.StringVar(&c.redisUser, "redis-username", env(ordersenv.VarRedisUsername, ""), "Redis ACL user of every master (ORDERS_REDIS_USERNAME; the password comes from ORDERS_REDIS_PASSWORD or ORDERS_REDIS_PASSWORD_FILE)")
	raw.redisTLS = new(bool)
	envBool(fs, errs, raw.redisTLS, "redis-tls", ordersenv.VarRedisTLS, false, "talk TLS to the Redis masters, verifying them against the system roots or ORDERS_REDIS_TLS_CA_FILE")
	raw.redisCA = fs.String("redis-tls-ca-file", env(ordersenv.VarRedisTLSCAFile, ""), "PEM file of the CA that signed the masters' certificates (ORDERS_REDIS_TLS_CA_FILE)")
	envBool(fs, errs, &c.redisDurable, "redis-durable", ordersenv.VarRedisDurable, false, "the Redis masters run appendonly yes with appendfsync always: a restarted node that kept its data votes at once")
}

// bindLockFlags: the stock lock and the per-product queues in front of it.
func (c *config) bindLockFlags(fs *flag.FlagSet, errs *[]error, raw *rawFlags) {
	raw.lock = fs.String("lock", env("ORDERS_LOCK", "auto"), "the quorum stock lock: auto (the requests queue on this instance and are placed in batches across products, one transaction each; a batch of contended products under one lease, a batch of quiet ones without the lock), on (every batch under one lease) or off (no lock, no batches: each request runs its own transaction and Postgres arbitrates alone; the fence and every database check stay either way) (ORDERS_LOCK)")
	raw.backend = fs.String("lock-backend", env("ORDERS_LOCK_BACKEND", "redlock"), "the stock lock's backend: redlock (the Redis masters of ORDERS_REDIS_ADDRS) or etcd (the cluster of ORDERS_ETCD_ENDPOINTS; the masters then hold only the idempotency records) (ORDERS_LOCK_BACKEND)")
	raw.etcd = fs.String("etcd-endpoints", env("ORDERS_ETCD_ENDPOINTS", ""), "comma-separated host:port of the etcd members, for ORDERS_LOCK_BACKEND=etcd (ORDERS_ETCD_ENDPOINTS)")
	raw.fallback = fs.String("lock-fallback", env("ORDERS_LOCK_FALLBACK", "db"), "when the lock quorum is lost: db or reject (ORDERS_LOCK_FALLBACK)")
	envDuration(fs, errs, &c.lockTTL, "lock-ttl", ordersenv.VarLockTTL, ordersenv.DefaultLockTTL, "stock lock TTL, which is also the restart guard's window")
	envDuration(fs, errs, &c.lockWait, "lock-wait", "ORDERS_LOCK_WAIT", 500*time.Millisecond, "longest wait for the stock lock")
	envDuration(fs, errs, &c.nodeTimeout, "node-timeout", ordersenv.VarNodeTimeout, 0, "per-node Redis timeout of the lock (0: the lock's default)")
	envInt(fs, errs, &c.batchLimit, "batch-limit", "ORDERS_BATCH_LIMIT", orders.DefaultBatchLimit, fmt.Sprintf("most orders one transaction places, 1 to %d", store.MaxBatch))
	envInt(fs, errs, &c.queueLimit, "queue-limit", "ORDERS_QUEUE_LIMIT", orders.DefaultQueueLimit, "most requests that wait for their turn, per product with the lock on, per instance with it off; one more is answered 503 at once")
	raw.queueWait = envLaterDuration(fs, errs, "queue-wait", "ORDERS_QUEUE_WAIT", "the longest `duration` a request waits for its turn before it is answered 503, having written nothing; default: twice ORDERS_LOCK_WAIT, room for the batch ahead to wait its lock out and then for this request's own")
	envDuration(fs, errs, &c.soldOutRecheck, "soldout-recheck", "ORDERS_SOLDOUT_RECHECK", orders.DefaultSoldOutRecheck, "how long a product Postgres found sold out is answered out of stock from that report before a transaction looks again; a restock on another instance is seen within it")
}

// bindRequestFlags: tokens, idempotency and payments.
func (c *config) bindRequestFlags(fs *flag.FlagSet, errs *[]error, raw *rawFlags) {
	fs.StringVar(&c.jwtIssuer, "jwt-issuer", env("ORDERS_JWT_ISSUER", ""), "require this iss in every token (ORDERS_JWT_ISSUER; empty: not checked)")
	fs.StringVar(&c.jwtAudience, "jwt-audience", env("ORDERS_JWT_AUDIENCE", ""), "require this aud in every token (ORDERS_JWT_AUDIENCE; empty: not checked)")
	envDuration(fs, errs, &c.jwtLifetime, "jwt-max-lifetime", "ORDERS_JWT_MAX_LIFETIME", auth.DefaultMaxLifetime, "refuse tokens whose exp is further away than this")
	fs.StringVar(&c.paymentURL, "payment-url", env("ORDERS_PAYMENT_URL", ""), "base URL of the payment provider, e.g. http://127.0.0.1:8090 for fakepay (ORDERS_PAYMENT_URL)")
	raw.codes = fs.String("idempotency-codes", env("ORDERS_IDEMPOTENCY_CODES", "seed"), "status codes of the idempotency conflicts: seed (202 while in flight, 409 for a reused key) or ietf (409 while in flight, 422 for a reused key) (ORDERS_IDEMPOTENCY_CODES)")
	envDuration(fs, errs, &c.idemTTL, "idempotency-ttl", "ORDERS_IDEMPOTENCY_TTL", 24*time.Hour, "how long an idempotency record is kept in Redis")
	envDuration(fs, errs, &c.idemLease, "processing-lease", "ORDERS_PROCESSING_LEASE", 10*time.Second, "how long a request may process before a retry may take it over")
	envDuration(fs, errs, &c.payTimeout, "payment-timeout", "ORDERS_PAYMENT_TIMEOUT", 10*time.Second, "bound on one charge or query at the provider, retries included; the reconciler re-sends a charge only once its attempt is older")
}

// bindBackgroundFlags: the reconciler, the reaper, the watchdog and the
// outbox relay.
func (c *config) bindBackgroundFlags(fs *flag.FlagSet, errs *[]error) {
	envDuration(fs, errs, &c.reconcile, "reconcile-interval", "ORDERS_RECONCILE_INTERVAL", 5*time.Second, "how often payments stuck in PAYING are settled")
	envDuration(fs, errs, &c.hold, "order-hold", "ORDERS_ORDER_HOLD", store.DefaultHold, "how long an unpaid order keeps its stock before it is cancelled and the stock returned")
	envDuration(fs, errs, &c.outcomeRetention, "outcome-retention", "ORDERS_OUTCOME_RETENTION", 7*24*time.Hour, "how long a saved out-of-stock answer is kept in Postgres for replays; at least ORDERS_IDEMPOTENCY_TTL")
	envDuration(fs, errs, &c.expireEvery, "expire-interval", "ORDERS_EXPIRE_INTERVAL", 30*time.Second, "how often unpaid orders past the hold are expired")
	envDuration(fs, errs, &c.invariantEvery, "invariant-interval", "ORDERS_INVARIANT_INTERVAL", watchdog.DefaultInterval, "how often the invariant watchdog checks the database and sets orders_invariant_violations; 0 turns it off")
	envDuration(fs, errs, &c.stuckPaying, "stuck-paying-after", "ORDERS_STUCK_PAYING_AFTER", watchdog.DefaultStuckPayingAfter, "how long an order may stay PAYING before the watchdog's stuck_paying check counts it")
	fs.StringVar(&c.eventsAddr, "events-redis-addr", env("ORDERS_EVENTS_REDIS_ADDR", ""), "the Redis server of the order event stream, HOST:PORT, with the masters' credentials and TLS (ORDERS_EVENTS_REDIS_ADDR; empty: the first of ORDERS_REDIS_ADDRS)")
	fs.StringVar(&c.eventsStream, "events-stream", env("ORDERS_EVENTS_STREAM", events.DefaultStream), "the Redis Stream the outbox relay publishes to (ORDERS_EVENTS_STREAM)")
	maxLen, err := strconv.ParseInt(env("ORDERS_EVENTS_MAXLEN", strconv.Itoa(events.DefaultMaxLen)), 10, 64)
	if err != nil || maxLen < 1 {
		*errs = append(*errs, fmt.Errorf("ORDERS_EVENTS_MAXLEN=%q: want a positive number of entries", env("ORDERS_EVENTS_MAXLEN", "")))
	}
	fs.Int64Var(&c.eventsMaxLen, "events-maxlen", maxLen, "entries the event stream keeps, roughly (XADD MAXLEN ~) (ORDERS_EVENTS_MAXLEN)")
	envDuration(fs, errs, &c.relayEvery, "relay-interval", "ORDERS_RELAY_INTERVAL", events.DefaultInterval, "how often the outbox relay looks for unsent events when it has none; 0 runs no relay on this instance")
	envDuration(fs, errs, &c.outboxRetention, "outbox-retention", "ORDERS_OUTBOX_RETENTION", 7*24*time.Hour, "how long published events stay in the outbox table")
}

// bindProcessFlags: migrations, shutdown and logs.
func (c *config) bindProcessFlags(fs *flag.FlagSet, errs *[]error, raw *rawFlags) {
	envBool(fs, errs, &c.migrate, "migrate", "ORDERS_MIGRATE", true, "run the migrations on start")
	envDuration(fs, errs, &c.shutdownWait, "shutdown-wait", "ORDERS_SHUTDOWN_WAIT", 0, "how long in-flight requests may finish on shutdown; 0: as long as the longest handler can take (the processing lease, or a payment call plus its settlement), plus 5s")
	raw.logFormat = fs.String("log-format", env("ORDERS_LOG_FORMAT", "text"), "log format: text or json (ORDERS_LOG_FORMAT)")
	raw.logLevel = fs.String("log-level", env("ORDERS_LOG_LEVEL", "info"), "least severe level logged: debug, info, warn or error; info logs one line per order request (ORDERS_LOG_LEVEL)")
}

// resolve turns the raw flags into config fields and fills the defaults
// that follow from other settings.
func (c *config) resolve(raw rawFlags) error {
	var errs []error
	switch *raw.logFormat {
	case "text", "json":
		c.logFormat = *raw.logFormat
	default:
		errs = append(errs, fmt.Errorf("ORDERS_LOG_FORMAT %q: want text or json", *raw.logFormat))
	}
	if err := c.logLevel.UnmarshalText([]byte(*raw.logLevel)); err != nil {
		errs = append(errs, fmt.Errorf("ORDERS_LOG_LEVEL %q: want debug, info, warn or error", *raw.logLevel))
	}
	if *raw.redisTLS || *raw.redisCA != "" {
		tc, err := ordersenv.RedisTLS(*raw.redisCA)
		errs = append(errs, err)
		c.redisTLS = tc
	}
	if c.shutdownWait == 0 {
		c.shutdownWait = c.longestHandler() + 5*time.Second
	}
	list, err := ordersenv.RedisAddrs(*raw.addrs)
	errs = append(errs, err)
	c.redisAddrs = list
	if c.eventsAddr == "" && len(list) > 0 {
		c.eventsAddr = list[0]
	}
	switch *raw.lock {
	case "auto", "on", "off":
		c.useLock, c.lockRule = *raw.lock != "off", orders.LockContended
		if *raw.lock == "on" {
			c.lockRule = orders.LockAlways
		}
	default:
		errs = append(errs, fmt.Errorf("ORDERS_LOCK %q: want auto, on or off", *raw.lock))
	}
	c.lockBackend = *raw.backend
	for _, e := range strings.Split(*raw.etcd, ",") {
		if e = strings.TrimSpace(e); e != "" {
			c.etcdEndpoints = append(c.etcdEndpoints, e)
		}
	}
	// The queue wait leaves room for the batch ahead to wait its lock out,
	// and then for this request's batch to wait out its own.
	c.queueWait = 2 * c.lockWait
	if raw.queueWait.set {
		c.queueWait = raw.queueWait.d
	}
	f, err := orders.ParseFallback(*raw.fallback)
	errs = append(errs, err)
	c.fallback = f
	cs, err := orders.ParseCodes(*raw.codes)
	if err != nil {
		err = fmt.Errorf("ORDERS_IDEMPOTENCY_CODES: %w", err)
	}
	errs = append(errs, err)
	c.codes = cs
	return errors.Join(errs...)
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

// check refuses a configuration whose values are out of range or do not
// fit together. Each error names its variable.
func (c config) check() error {
	return errors.Join(c.checkEndpoints(), c.checkDurations(), c.checkLock(), c.checkBackground(), c.checkRelations())
}

// checkEndpoints checks the addresses, URLs and secrets.
func (c config) checkEndpoints() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.listen); err != nil {
		errs = append(errs, fmt.Errorf("ORDERS_LISTEN %q: %w", c.listen, err))
	}
	if c.databaseURL == "" {
		errs = append(errs, errors.New("ORDERS_DATABASE_URL is empty"))
	}
	if _, err := pgconn.ParseConfig(c.pghaMonitorURL); c.pghaMonitorURL != "" && err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", varPGHAMonitorURL, errors.New("cannot be parsed (its text is not shown: it may hold a password)")))
	}
	if c.paymentURL == "" {
		errs = append(errs, errors.New("ORDERS_PAYMENT_URL is empty: give the payment provider's base URL (devtools/cmd/fakepay for development)"))
	} else if u, err := url.Parse(c.paymentURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("ORDERS_PAYMENT_URL %q: want an http or https URL with a host", c.paymentURL))
	}
	if c.callbackKey != "" && len(c.callbackKey) < 16 {
		errs = append(errs, errors.New("ORDERS_PAYMENT_CALLBACK_SECRET must be at least 16 bytes"))
	}
	if len(c.jwtSecret) < auth.MinSecretLen {
		errs = append(errs, fmt.Errorf("ORDERS_JWT_SECRET must be at least %d bytes", auth.MinSecretLen))
	}
	if c.eventsAddr != "" {
		if _, _, err := net.SplitHostPort(c.eventsAddr); err != nil {
			errs = append(errs, fmt.Errorf("ORDERS_EVENTS_REDIS_ADDR %q: %w", c.eventsAddr, err))
		}
	}
	return errors.Join(errs...)
}

// checkDurations refuses a zero or negative duration where a positive one
// is needed.
func (c config) checkDurations() error {
	var errs []error
	for name, d := range map[string]time.Duration{
		ordersenv.VarLockTTL: c.lockTTL, "ORDERS_LOCK_WAIT": c.lockWait, "ORDERS_IDEMPOTENCY_TTL": c.idemTTL,
		"ORDERS_PROCESSING_LEASE": c.idemLease, "ORDERS_RECONCILE_INTERVAL": c.reconcile, "ORDERS_PAYMENT_TIMEOUT": c.payTimeout,
		"ORDERS_ORDER_HOLD": c.hold, "ORDERS_JWT_MAX_LIFETIME": c.jwtLifetime, "ORDERS_EXPIRE_INTERVAL": c.expireEvery,
		"ORDERS_QUEUE_WAIT": c.queueWait, "ORDERS_SOLDOUT_RECHECK": c.soldOutRecheck,
	} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %v", name, d))
		}
	}
	if c.nodeTimeout < 0 {
		errs = append(errs, fmt.Errorf("ORDERS_NODE_TIMEOUT must not be negative, got %v", c.nodeTimeout))
	}
	return errors.Join(errs...)
}

// checkLock checks the lock's mode and the queues' bounds.
func (c config) checkLock() error {
	var errs []error
	if c.batchLimit < 1 || c.batchLimit > store.MaxBatch {
		errs = append(errs, fmt.Errorf("ORDERS_BATCH_LIMIT must be 1 to %d, got %d", store.MaxBatch, c.batchLimit))
	}
	if c.queueLimit < 1 {
		errs = append(errs, fmt.Errorf("ORDERS_QUEUE_LIMIT must be at least 1, got %d", c.queueLimit))
	}
	if !c.useLock && c.fallback == orders.FallbackReject {
		errs = append(errs, errors.New("ORDERS_LOCK_FALLBACK=reject with ORDERS_LOCK=off would refuse every order: with the lock off, Postgres always arbitrates alone (unset the fallback, or set it to db)"))
	}
	return errors.Join(append(errs, c.checkBackend())...)
}

// checkBackend checks the lock's backend and its endpoints.
func (c config) checkBackend() error {
	switch {
	case c.lockBackend != "redlock" && c.lockBackend != "etcd":
		return fmt.Errorf("ORDERS_LOCK_BACKEND %q: want redlock or etcd", c.lockBackend)
	case c.lockBackend == "etcd" && !c.useLock:
		return errors.New("ORDERS_LOCK_BACKEND=etcd with ORDERS_LOCK=off: with the lock off there is no backend (unset one of them)")
	case c.lockBackend == "etcd" && len(c.etcdEndpoints) == 0:
		return errors.New("ORDERS_LOCK_BACKEND=etcd needs ORDERS_ETCD_ENDPOINTS, the etcd members' host:port")
	case c.lockBackend == "redlock" && len(c.etcdEndpoints) > 0:
		return errors.New("ORDERS_ETCD_ENDPOINTS is set but ORDERS_LOCK_BACKEND is redlock: set ORDERS_LOCK_BACKEND=etcd, or unset the endpoints")
	}
	for _, e := range c.etcdEndpoints {
		if _, _, err := net.SplitHostPort(e); err != nil {
			return fmt.Errorf("ORDERS_ETCD_ENDPOINTS: %q is not host:port", e)
		}
	}
	return nil
}

// checkBackground checks the watchdog's and the outbox's settings.
func (c config) checkBackground() error {
	var errs []error
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
	return errors.Join(errs...)
}

// checkRelations checks the settings that bound one another.
func (c config) checkRelations() error {
	var errs []error
	if c.shutdownWait < c.longestHandler() {
		errs = append(errs, fmt.Errorf("ORDERS_SHUTDOWN_WAIT (%v) is shorter than the longest request can take (%v): a shutdown would cut requests off", c.shutdownWait, c.longestHandler()))
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
