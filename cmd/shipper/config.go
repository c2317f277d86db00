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
	var c config
	var errs []error
	get := func(name, def string) string {
		if v, ok := env(name); ok {
			return v
		}
		return def
	}
	duration := func(name string, def time.Duration) time.Duration {
		v, ok := env(name)
		if !ok {
			return def
		}
		d, err := ordersenv.Duration(name, v)
		if err != nil {
			errs = append(errs, err)
			return def
		}
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %v", name, d))
		}
		return d
	}

	url, err := ordersenv.Secret(env, ordersenv.VarDatabaseURL)
	errs = append(errs, err)
	c.databaseURL = secret(url)
	switch {
	case err != nil:
	case url == "":
		errs = append(errs, fmt.Errorf("%s (or %s%s) is empty: give the orders database", ordersenv.VarDatabaseURL, ordersenv.VarDatabaseURL, ordersenv.FileSuffix))
	default:
		// The driver's message may quote the string: it is not passed on.
		if _, err := pgxpool.ParseConfig(url); err != nil {
			errs = append(errs, fmt.Errorf("%s: not a valid Postgres connection string (URL or key=value)", ordersenv.VarDatabaseURL))
		}
	}
	pw, err := ordersenv.Secret(env, ordersenv.VarRedisPassword)
	errs = append(errs, err)
	c.redisPassword = secret(pw)
	c.redisUser = get(ordersenv.VarRedisUsername, "")

	c.eventsAddr = strings.TrimSpace(get(varEventsAddr, ""))
	if c.eventsAddr != "" {
		if _, port, err := net.SplitHostPort(c.eventsAddr); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", varEventsAddr, c.eventsAddr, err))
		} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			errs = append(errs, fmt.Errorf("%s %q: port %q is not a number in 1-65535", varEventsAddr, c.eventsAddr, port))
		}
	} else if list, ok := env(ordersenv.VarRedisAddrs); ok && strings.TrimSpace(list) != "" {
		addrs, err := ordersenv.RedisAddrs(list)
		errs = append(errs, err)
		if len(addrs) > 0 {
			c.eventsAddr = addrs[0]
		}
	} else {
		errs = append(errs, fmt.Errorf("%s and %s are both empty: give the Redis server of the event stream", varEventsAddr, ordersenv.VarRedisAddrs))
	}

	useTLS, err := ordersenv.Bool(ordersenv.VarRedisTLS, get(ordersenv.VarRedisTLS, "false"))
	errs = append(errs, err)
	if ca := get(ordersenv.VarRedisTLSCAFile, ""); useTLS || ca != "" {
		tc, err := ordersenv.RedisTLS(ca)
		errs = append(errs, err)
		c.redisTLS = tc
	}

	c.stream = get(varEventsStream, events.DefaultStream)
	if c.stream == "" {
		errs = append(errs, fmt.Errorf("%s is empty", varEventsStream))
	}
	c.group = get(varGroup, defaultGroup)
	if c.group == "" || strings.ContainsAny(c.group, " \t\r\n{}") {
		errs = append(errs, fmt.Errorf("%s %q: want a non-empty name without spaces or braces", varGroup, c.group))
	}
	if v, ok := env(varName); ok {
		c.name = v
	} else {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "shipper"
		}
		c.name = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if c.name == "" || strings.ContainsAny(c.name, " \t\r\n") {
		errs = append(errs, fmt.Errorf("%s %q: want a non-empty name without spaces", varName, c.name))
	}

	c.claimIdle = duration(varClaimIdle, events.DefaultClaimIdle)
	if c.claimIdle > 0 && c.claimIdle < minClaimIdle {
		errs = append(errs, fmt.Errorf("%s must be at least %v, got %v", varClaimIdle, minClaimIdle, c.claimIdle))
	}
	c.lease = duration(varLease, events.DefaultLease)
	c.window = duration(varWindow, events.DefaultWindow)

	c.listen = get(varListen, defaultListen)
	if _, _, err := net.SplitHostPort(c.listen); err != nil {
		errs = append(errs, fmt.Errorf("%s %q: %w", varListen, c.listen, err))
	}
	switch c.logFormat = get(varLogFormat, "text"); c.logFormat {
	case "text", "json":
	default:
		errs = append(errs, fmt.Errorf("%s %q: want text or json", varLogFormat, c.logFormat))
	}
	if lv := get(varLogLevel, "info"); c.logLevel.UnmarshalText([]byte(lv)) != nil {
		errs = append(errs, fmt.Errorf("%s %q: want debug, info, warn or error", varLogLevel, lv))
	}
	return c, errors.Join(errs...)
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
