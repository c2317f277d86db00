package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/quorumlock/quorumlock/internal/cli"
	"github.com/quorumlock/quorumlock/internal/ordersenv"
	"github.com/quorumlock/quorumlock/lease"
)

// Defaults of the operator commands. The lock TTL is ordersd's default
// (ORDERS_LOCK_TTL), which is also the restart window of its guard.
const (
	defaultLockTTL = ordersenv.DefaultLockTTL
	defaultTimeout = time.Second
)

// Output formats (-o).
const (
	outputTable = "table"
	outputJSON  = "json"
)

// flagVars holds the values of the connection flags of one command. A flag
// left unset falls back to its ORDERS_* variable, then to the default (see
// app.settings).
type flagVars struct {
	redis, databaseURL, redisUser, redisCA string
	redisTLS, durable                      bool
	lockTTL, nodeTimeout, timeout          time.Duration
	output                                 string
}

// Which flags a command takes.
const (
	withRedis       = 1 << iota // the masters and their credentials
	withGuard                   // the restart window and durable nodes
	withDB                      // the database URL
	withNodeTimeout             // the lock's per-node timeout
)

// addFlags registers the flags of groups, plus --timeout and -o, on cmd.
func (v *flagVars) addFlags(cmd *cobra.Command, groups int) {
	fs := cmd.Flags()
	if groups&withRedis != 0 {
		fs.StringVar(&v.redis, "redis", "", "comma-separated Redis masters, HOST:PORT (ORDERS_REDIS_ADDRS)")
		fs.StringVar(&v.redisUser, "redis-username", "", "Redis ACL user of every master (ORDERS_REDIS_USERNAME; the password comes from ORDERS_REDIS_PASSWORD or ORDERS_REDIS_PASSWORD_FILE only)")
		fs.BoolVar(&v.redisTLS, "redis-tls", false, "talk TLS to the masters (ORDERS_REDIS_TLS)")
		fs.StringVar(&v.redisCA, "redis-tls-ca-file", "", "PEM file of the CA of the masters' certificates (ORDERS_REDIS_TLS_CA_FILE)")
	}
	if groups&withGuard != 0 {
		fs.DurationVar(&v.lockTTL, "lock-ttl", defaultLockTTL, "ordersd's lock TTL, which is its restart window (ORDERS_LOCK_TTL)")
		fs.BoolVar(&v.durable, "redis-durable", false, "the masters run appendonly yes with appendfsync always (ORDERS_REDIS_DURABLE)")
	}
	if groups&withNodeTimeout != 0 {
		fs.DurationVar(&v.nodeTimeout, "node-timeout", 0, "per-node timeout of the lock; 0: the lock's default (ORDERS_NODE_TIMEOUT)")
	}
	if groups&withDB != 0 {
		fs.StringVar(&v.databaseURL, "database-url", "", "Postgres URL (ORDERS_DATABASE_URL or ORDERS_DATABASE_URL_FILE; prefer those: a flag shows in ps)")
	}
	fs.DurationVar(&v.timeout, "timeout", defaultTimeout, "bound on each request to a node or to the database")
	fs.StringVarP(&v.output, "output", "o", outputTable, "output format: table or json")
}

// settings are the resolved connection settings of one command.
type settings struct {
	addrs         []string
	redisUser     string
	redisPassword string
	redisTLS      *tls.Config
	durable       bool
	window        time.Duration // ordersd's lock TTL: its restart window
	nodeTimeout   time.Duration
	timeout       time.Duration
	databaseURL   string
	json          bool
}

// settings resolves the flags of cmd over the environment. Every problem is
// named, and no secret appears in the error.
func (a *app) settings(cmd *cobra.Command, v *flagVars, groups int) (settings, error) {
	fs := cmd.Flags()
	var s settings
	var errs []error
	switch v.output {
	case outputTable:
	case outputJSON:
		s.json = true
	default:
		errs = append(errs, fmt.Errorf("-o %q: want table or json", v.output))
	}
	s.timeout = v.timeout
	if s.timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout must be positive, got %v", s.timeout))
	}
	if groups&withRedis != 0 {
		errs = append(errs, a.redisSettings(fs, &s))
	}
	if groups&withGuard != 0 {
		errs = append(errs, a.guardSettings(fs, &s))
	}
	if groups&withNodeTimeout != 0 {
		d, err := a.durationValue(fs, "node-timeout", ordersenv.VarNodeTimeout)
		errs = append(errs, err)
		if err == nil && d < 0 {
			errs = append(errs, fmt.Errorf("the node timeout (--node-timeout, ORDERS_NODE_TIMEOUT) must not be negative, got %v", d))
		}
		s.nodeTimeout = d
	}
	if groups&withDB != 0 {
		if f := fs.Lookup("database-url"); f != nil && f.Changed {
			s.databaseURL = v.databaseURL
		} else {
			u, err := a.secret(ordersenv.VarDatabaseURL)
			errs = append(errs, err)
			s.databaseURL = u
		}
		a.addDatabaseSecrets(s.databaseURL)
	}
	if err := errors.Join(errs...); err != nil {
		return s, cli.UsageError("%w", err)
	}
	return s, nil
}

// redisSettings resolves the masters, their credentials and TLS into s,
// and returns every problem joined.
func (a *app) redisSettings(fs *pflag.FlagSet, s *settings) error {
	var errs []error
	addrs, _ := a.value(fs, "redis", ordersenv.VarRedisAddrs)
	list, err := ordersenv.RedisAddrs(addrs)
	switch {
	case err != nil && strings.Trim(addrs, " ,") == "":
		err = fmt.Errorf("no Redis masters: set %s or --redis to HOST:PORT[,HOST:PORT...]: %w", ordersenv.VarRedisAddrs, ordersenv.ErrInvalid)
	case err != nil:
		err = fmt.Errorf("the Redis masters (--redis, or %s): %w", ordersenv.VarRedisAddrs, err)
	}
	errs = append(errs, err)
	s.addrs = list
	s.redisUser, _ = a.value(fs, "redis-username", ordersenv.VarRedisUsername)
	pw, err := a.secret(ordersenv.VarRedisPassword)
	errs = append(errs, err)
	s.redisPassword = pw
	a.addSecret(pw)
	useTLS, err := a.boolValue(fs, "redis-tls", ordersenv.VarRedisTLS)
	errs = append(errs, err)
	ca, _ := a.value(fs, "redis-tls-ca-file", ordersenv.VarRedisTLSCAFile)
	if useTLS || ca != "" {
		tc, err := ordersenv.RedisTLS(ca)
		errs = append(errs, err)
		s.redisTLS = tc
	}
	return errors.Join(errs...)
}

// guardSettings resolves the restart window (ordersd's lock TTL) and the
// masters' durability into s, and returns every problem joined.
func (a *app) guardSettings(fs *pflag.FlagSet, s *settings) error {
	var errs []error
	d, err := a.durationValue(fs, "lock-ttl", ordersenv.VarLockTTL)
	errs = append(errs, err)
	s.window = d
	if err == nil && d <= 0 {
		errs = append(errs, fmt.Errorf("the lock TTL (--lock-ttl, ORDERS_LOCK_TTL) must be positive, got %v", d))
	}
	durable, err := a.boolValue(fs, "redis-durable", ordersenv.VarRedisDurable)
	errs = append(errs, err)
	s.durable = durable
	return errors.Join(errs...)
}

// value returns the flag name when it was set, else the variable envName.
func (a *app) value(fs *pflag.FlagSet, name, envName string) (string, bool) {
	if f := fs.Lookup(name); f != nil && f.Changed {
		return f.Value.String(), true
	}
	if v, ok := a.env(envName); ok {
		return v, true
	}
	if f := fs.Lookup(name); f != nil {
		return f.DefValue, false
	}
	return "", false
}

func (a *app) durationValue(fs *pflag.FlagSet, name, envName string) (time.Duration, error) {
	if f := fs.Lookup(name); f != nil && !f.Changed {
		if v, ok := a.env(envName); ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				return 0, fmt.Errorf("%s=%q: %w", envName, v, err)
			}
			return d, nil
		}
	}
	d, err := fs.GetDuration(name)
	if err != nil {
		return 0, fmt.Errorf("--%s: %w", name, err)
	}
	return d, nil
}

func (a *app) boolValue(fs *pflag.FlagSet, name, envName string) (bool, error) {
	if f := fs.Lookup(name); f != nil && !f.Changed {
		if v, ok := a.env(envName); ok {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return false, fmt.Errorf("%s=%q: want true or false", envName, v)
			}
			return b, nil
		}
	}
	b, err := fs.GetBool(name)
	if err != nil {
		return false, fmt.Errorf("--%s: %w", name, err)
	}
	return b, nil
}

// secret returns the value of the secret variable name, or the content of
// the file named by name_FILE. Errors name the variables and the file,
// never the value.
func (a *app) secret(name string) (string, error) {
	return ordersenv.Secret(a.env, name)
}

// redisOptions are the options of a client to the master at addr: every
// request bounded by its context and by the timeout, never retried (a
// retried release could not tell "deleted by my first try" from "never
// mine"), as the lock requires.
func (s settings) redisOptions(addr string) *redis.Options {
	var tc *tls.Config
	if s.redisTLS != nil {
		tc = s.redisTLS.Clone()
	}
	return &redis.Options{
		Addr: addr, Username: s.redisUser, Password: s.redisPassword, TLSConfig: tc,
		DialTimeout: s.timeout, ReadTimeout: s.timeout, WriteTimeout: s.timeout,
		MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: 4, DisableIdentity: true,
	}
}

// clients opens one client per master; close them with closeAll.
func (s settings) clients() []*redis.Client {
	out := make([]*redis.Client, len(s.addrs))
	for i, a := range s.addrs {
		out[i] = redis.NewClient(s.redisOptions(a))
	}
	return out
}

func closeAll(cs []*redis.Client) {
	for _, c := range cs {
		_ = c.Close()
	}
}

// addDatabaseSecrets records the password of a database URL, however it
// is given (in the URL's user info, as a password parameter, in a
// keyword/value string), so that no error can show it.
func (a *app) addDatabaseSecrets(dsn string) {
	if dsn == "" {
		return
	}
	if cfg, err := pgx.ParseConfig(dsn); err == nil {
		a.addSecret(cfg.Password)
	}
	if u, err := url.Parse(dsn); err == nil {
		if pw, ok := u.User.Password(); ok {
			a.addSecret(pw)
			a.addSecret(url.QueryEscape(pw))
			a.addSecret(strings.TrimPrefix(url.UserPassword("", pw).String(), ":"))
		}
		a.addSecret(u.Query().Get("password"))
	}
	for _, m := range kvPassword().FindAllStringSubmatch(dsn, -1) {
		a.addSecret(strings.Trim(m[1], "'"))
	}
}

// kvPassword matches the password of a keyword/value connection string.
func kvPassword() *regexp.Regexp {
	return regexp.MustCompile(`password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)`)
}

// redactDSN returns dsn with its password replaced by xxxxx, fit to print.
func redactDSN(dsn string) string {
	if strings.Contains(dsn, "://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "(a database URL that does not parse; not shown)"
		}
		if q := u.Query(); q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.Redacted()
	}
	return kvPassword().ReplaceAllString(dsn, "password=xxxxx")
}

// connectDB opens one connection to the database of s within its timeout.
func (s settings) connectDB(ctx context.Context) (*pgx.Conn, error) {
	if s.databaseURL == "" {
		return nil, cli.UsageError("no database: set ORDERS_DATABASE_URL (or ORDERS_DATABASE_URL_FILE) or --database-url")
	}
	cfg, err := pgx.ParseConfig(s.databaseURL)
	if err != nil {
		return nil, cli.UsageError("database URL %s: %w", redactDSN(s.databaseURL), err)
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("database %s is unreachable: %w", redactDSN(s.databaseURL), err)
	}
	return conn, nil
}

// digest is the short form of a token that the commands print, the same
// as ordersd's log shows (lease.TokenDigest). A token grants unlock; its
// digest does not.
func digest(token string) string { return lease.TokenDigest(token) }

// writeJSON prints v as indented JSON.
func (a *app) writeJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write JSON: %w", err)
	}
	return nil
}

// ms is d in milliseconds, with microsecond precision.
func ms(d time.Duration) float64 {
	return float64(d.Microseconds()) / 1000
}

// majority is the number of votes a lock needs over n masters.
func majority(n int) int { return n/2 + 1 }
