package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quorumlock/quorumlock/internal/ordersenv"
	"github.com/quorumlock/quorumlock/orders/events"
)

// The variables the shipper reads besides the ORDERS_* ones it shares with
// ordersd (see the package comment).
const (
	varGroup     = "SHIPPER_GROUP"
	varName      = "SHIPPER_NAME"
	varClaimIdle = "SHIPPER_CLAIM_IDLE"
	varLease     = "SHIPPER_LEASE"
	varWindow    = "SHIPPER_DEDUP_WINDOW"
	varListen    = "SHIPPER_LISTEN"

	varEventsAddr   = "ORDERS_EVENTS_REDIS_ADDR"
	varEventsStream = "ORDERS_EVENTS_STREAM"
	varLogFormat    = "ORDERS_LOG_FORMAT"
	varLogLevel     = "ORDERS_LOG_LEVEL"
)

// Defaults of the shipper's own settings.
const (
	defaultGroup  = "shipper"
	defaultListen = "127.0.0.1:8091"
	// minClaimIdle is the shortest SHIPPER_CLAIM_IDLE: the read block is
	// derived from it (see config.block) and must stay positive.
	minClaimIdle = 10 * time.Millisecond
)

// secret is a configuration value that must never be printed: formatted
// with any verb, or logged with slog, it shows as [redacted]. reveal gives
// the value to the one caller that needs it.
type secret string

// String hides the value.
func (secret) String() string { return "[redacted]" }

// GoString hides the value from %#v.
func (secret) GoString() string { return "[redacted]" }

// LogValue hides the value from slog.
func (secret) LogValue() slog.Value { return slog.StringValue("[redacted]") }

func (s secret) reveal() string { return string(s) }

// config is the shipper's configuration, read from the environment only:
// the service runs under a supervisor that sets variables, and the secrets
// (the database URL, which carries its password, and the Redis password)
// must not show in ps as flags would.
type config struct {
	databaseURL   secret        // ORDERS_DATABASE_URL or ORDERS_DATABASE_URL_FILE
	eventsAddr    string        // ORDERS_EVENTS_REDIS_ADDR, else the first of ORDERS_REDIS_ADDRS
	redisUser     string        // ORDERS_REDIS_USERNAME
	redisPassword secret        // ORDERS_REDIS_PASSWORD or ORDERS_REDIS_PASSWORD_FILE
	redisTLS      *tls.Config   // ORDERS_REDIS_TLS, ORDERS_REDIS_TLS_CA_FILE (nil: plain TCP)
	stream        string        // ORDERS_EVENTS_STREAM
	group         string        // SHIPPER_GROUP
	name          string        // SHIPPER_NAME (default: hostname-pid)
	claimIdle     time.Duration // SHIPPER_CLAIM_IDLE
	lease         time.Duration // SHIPPER_LEASE
	window        time.Duration // SHIPPER_DEDUP_WINDOW
	listen        string        // SHIPPER_LISTEN
	logFormat     string        // ORDERS_LOG_FORMAT: text or json
	logLevel      slog.Level    // ORDERS_LOG_LEVEL
}

// String shows the configuration without its secrets, which show as
// [redacted] when set. fmt does not call the secrets' own String on the
// fields of a struct, so the config must hide them itself.
func (c config) String() string {
	hide := func(s secret) string {
		if s == "" {
			return `""`
		}
		return s.String()
	}
	return fmt.Sprintf("{database %s, redis %s user %q password %s tls %v, stream %q, group %q, name %q, claim idle %v, lease %v, window %v, listen %q, log %s/%v}",
		hide(c.databaseURL), c.eventsAddr, c.redisUser, hide(c.redisPassword), c.redisTLS != nil, c.stream, c.group, c.name,
		c.claimIdle, c.lease, c.window, c.listen, c.logFormat, c.logLevel)
}

// GoString is String, for %#v.
func (c config) GoString() string { return c.String() }

// LogValue is String, for slog.
func (c config) LogValue() slog.Value { return slog.StringValue(c.String()) }

// usage describes the variables, for -h.
const usage = `usage: shipper

shipper takes no arguments: it is configured by the environment.

  ORDERS_DATABASE_URL or ORDERS_DATABASE_URL_FILE   the orders database (a secret; never a flag). Required.
                                                    ordersd migrates it: the shipper does not.
  ORDERS_EVENTS_REDIS_ADDR     HOST:PORT of the Redis holding the event stream (default: the first of ORDERS_REDIS_ADDRS)
  ORDERS_REDIS_ADDRS           the masters ordersd uses; only read when ORDERS_EVENTS_REDIS_ADDR is unset
  ORDERS_REDIS_USERNAME        Redis ACL user
  ORDERS_REDIS_PASSWORD or ORDERS_REDIS_PASSWORD_FILE   Redis password (a secret)
  ORDERS_REDIS_TLS             true: talk TLS to Redis (default false)
  ORDERS_REDIS_TLS_CA_FILE     PEM file of the CA of Redis's certificate (implies TLS)
  ORDERS_EVENTS_STREAM         the stream ordersd's relay publishes to (default orders:events)
  SHIPPER_GROUP                consumer group (default shipper)
  SHIPPER_NAME                 this consumer's name in the group, unique per process (default hostname-pid)
  SHIPPER_CLAIM_IDLE           a message pending this long with another consumer is taken over (default 30s)
  SHIPPER_LEASE                how long this consumer's claim on one event keeps the others off it (default 30s)
  SHIPPER_DEDUP_WINDOW         how long Redis answers the repeats of a processed event (default 24h);
                               after it the consumed_events row still does
  SHIPPER_LISTEN               HTTP address of /metrics and /healthz (default 127.0.0.1:8091)
  ORDERS_LOG_FORMAT            text or json (default text)
  ORDERS_LOG_LEVEL             debug, info, warn or error (default info)
  QUORUMLOCK_FAILPOINTS        after-consume=kill|stop (only a -tags failpoints build arms it)
`

// parseConfig reads the configuration from env and checks it. Every error
// names its variable and none carries a secret's value; all the errors are
// reported at once.
func parseConfig(env ordersenv.Lookup) (config, error) {
	r := &envReader{env: env}
	var c config
	c.databaseURL = r.databaseURL()
	pw, err := ordersenv.Secret(env, ordersenv.VarRedisPassword)
	r.check(err)
	c.redisPassword = secret(pw)
	c.redisUser = r.get(ordersenv.VarRedisUsername, "")
	c.eventsAddr = r.eventsAddr()
	c.redisTLS = r.redisTLS()
	c.stream = r.get(varEventsStream, events.DefaultStream)
	if c.stream == "" {
		r.check(fmt.Errorf("%s is empty", varEventsStream))
	}
	c.group = r.get(varGroup, defaultGroup)
	if c.group == "" || strings.ContainsAny(c.group, " \t\r\n{}") {
		r.check(fmt.Errorf("%s %q: want a non-empty name without spaces or braces", varGroup, c.group))
	}
	c.name = r.consumerName()
	c.claimIdle = r.duration(varClaimIdle, events.DefaultClaimIdle)
	if c.claimIdle > 0 && c.claimIdle < minClaimIdle {
		r.check(fmt.Errorf("%s must be at least %v, got %v", varClaimIdle, minClaimIdle, c.claimIdle))
	}
	c.lease = r.duration(varLease, events.DefaultLease)
	c.window = r.duration(varWindow, events.DefaultWindow)
	c.listen = r.get(varListen, defaultListen)
	if _, _, err := net.SplitHostPort(c.listen); err != nil {
		r.check(fmt.Errorf("%s %q: %w", varListen, c.listen, err))
	}
	switch c.logFormat = r.get(varLogFormat, "text"); c.logFormat {
	case "text", "json":
	default:
		r.check(fmt.Errorf("%s %q: want text or json", varLogFormat, c.logFormat))
	}
	if lv := r.get(varLogLevel, "info"); c.logLevel.UnmarshalText([]byte(lv)) != nil {
		r.check(fmt.Errorf("%s %q: want debug, info, warn or error", varLogLevel, lv))
	}
	return c, errors.Join(r.errs...)
}

// envReader reads variables from env and keeps every problem it meets, in
// order, so that parseConfig reports them all at once.
type envReader struct {
	env  ordersenv.Lookup
	errs []error
}

// check keeps err unless it is nil.
func (r *envReader) check(err error) {
	if err != nil {
		r.errs = append(r.errs, err)
	}
}

// get is the variable name, or def when it is unset.
func (r *envReader) get(name, def string) string {
	if v, ok := r.env(name); ok {
		return v
	}
	return def
}

// duration is the variable name as a positive duration, or def when it is
// unset or not a duration.
func (r *envReader) duration(name string, def time.Duration) time.Duration {
	v, ok := r.env(name)
	if !ok {
		return def
	}
	d, err := ordersenv.Duration(name, v)
	if err != nil {
		r.check(err)
		return def
	}
	if d <= 0 {
		r.check(fmt.Errorf("%s must be positive, got %v", name, d))
	}
	return d
}

// databaseURL is the orders database's connection string, which must be
// given and parse. The driver's message may quote the string: it is not
// passed on.
func (r *envReader) databaseURL() secret {
	url, err := ordersenv.Secret(r.env, ordersenv.VarDatabaseURL)
	r.check(err)
	switch {
	case err != nil:
	case url == "":
		r.check(fmt.Errorf("%s (or %s%s) is empty: give the orders database", ordersenv.VarDatabaseURL, ordersenv.VarDatabaseURL, ordersenv.FileSuffix))
	default:
		if _, err := pgxpool.ParseConfig(url); err != nil {
			r.check(fmt.Errorf("%s: not a valid Postgres connection string (URL or key=value)", ordersenv.VarDatabaseURL))
		}
	}
	return secret(url)
}

// eventsAddr is the Redis server of the event stream: its own variable,
// else the first of ordersd's masters.
func (r *envReader) eventsAddr() string {
	addr := strings.TrimSpace(r.get(varEventsAddr, ""))
	if addr != "" {
		if _, port, err := net.SplitHostPort(addr); err != nil {
			r.check(fmt.Errorf("%s %q: %w", varEventsAddr, addr, err))
		} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			r.check(fmt.Errorf("%s %q: port %q is not a number in 1-65535", varEventsAddr, addr, port))
		}
		return addr
	}
	list, ok := r.env(ordersenv.VarRedisAddrs)
	if !ok || strings.TrimSpace(list) == "" {
		r.check(fmt.Errorf("%s and %s are both empty: give the Redis server of the event stream", varEventsAddr, ordersenv.VarRedisAddrs))
		return ""
	}
	addrs, err := ordersenv.RedisAddrs(list)
	r.check(err)
	if len(addrs) > 0 {
		return addrs[0]
	}
	return ""
}

// redisTLS is the TLS configuration for Redis, nil for plain TCP.
func (r *envReader) redisTLS() *tls.Config {
	useTLS, err := ordersenv.Bool(ordersenv.VarRedisTLS, r.get(ordersenv.VarRedisTLS, "false"))
	r.check(err)
	ca := r.get(ordersenv.VarRedisTLSCAFile, "")
	if !useTLS && ca == "" {
		return nil
	}
	tc, err := ordersenv.RedisTLS(ca)
	r.check(err)
	return tc
}

// consumerName is this consumer's name in the group: its variable, else
// hostname-pid.
func (r *envReader) consumerName() string {
	name, ok := r.env(varName)
	if !ok {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "shipper"
		}
		name = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if name == "" || strings.ContainsAny(name, " \t\r\n") {
		r.check(fmt.Errorf("%s %q: want a non-empty name without spaces", varName, name))
	}
	return name
}

// block is how long a read waits for new messages: the consumers' default,
// or half the claim idle time when that is shorter, since the idle time
// must exceed the block.
func (c config) block() time.Duration {
	return min(events.DefaultBlock, c.claimIdle/2)
}

// logger is the service's logger on w, in the configured format and level.
func (c config) logger(w io.Writer) *slog.Logger {
	o := &slog.HandlerOptions{Level: c.logLevel}
	if c.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}
