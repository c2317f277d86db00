package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/orders/auth"
)

// Secrets come from these variables when their flag is not given.
const (
	envJWTSecret   = "ORDERS_JWT_SECRET"
	envDatabaseURL = "ORDERS_DATABASE_URL"
)

// Bounds of the flags.
const (
	// maxClients bounds each side's closed-loop connections.
	maxClients = 10_000
	// maxDuration bounds the measured window and the warm-up.
	maxDuration = 10 * time.Minute
	// maxSettle bounds the wait for the servers to answer the last
	// requests.
	maxSettle = 2 * time.Minute
	// maxLabel bounds -label, which prefixes nothing but the report.
	maxLabel = 64
)

// config is one invocation's settings.
type config struct {
	urls        []string      // base URLs of the ordersd instances, loopback only
	jwtSecret   []byte        // signs the users' tokens; never printed
	databaseURL string        // for the seed and the check; never printed
	distinct    int           // closed-loop clients each ordering its own product
	popular     int           // closed-loop clients ordering the one popular product
	stock       int64         // units seeded of every product
	duration    time.Duration // the measured window
	warmup      time.Duration // load before the window, not measured
	timeout     time.Duration // a client's wait for one answer
	settle      time.Duration // the longest wait for the servers to answer every request sent
	label       string        // names the run in the report, e.g. auto/mixed
	jsonPath    string        // where the figures go as JSON; "" for none
}

// usageError is a bad command line: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// parseConfig reads the flags of the load command; the secrets default to
// their variables, read through getenv. Usage goes to out.
func parseConfig(args []string, getenv func(string) string, out io.Writer) (config, error) {
	var c config
	var urls, secret string
	fs := flag.NewFlagSet("orderload", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintln(out, "usage: orderload -urls URL[,URL...] [flags]        drive ordersd instances and check the database")
		fmt.Fprintln(out, "       orderload summary FILE.json...             one table of several runs' -json files")
		fmt.Fprintf(out, "secrets: -jwt-secret defaults to $%s, -database-url to $%s (prefer the variables: flags show in ps)\n", envJWTSecret, envDatabaseURL)
		fs.PrintDefaults()
	}
	fs.StringVar(&urls, "urls", "", "comma-separated base URLs of the ordersd instances (loopback only); requests go round-robin")
	fs.StringVar(&secret, "jwt-secret", "", "HS256 secret of ordersd's tokens (default $"+envJWTSecret+")")
	fs.StringVar(&c.databaseURL, "database-url", "", "Postgres URL of ordersd's database, to seed the products and check the orders (default $"+envDatabaseURL+")")
	fs.IntVar(&c.distinct, "distinct", 66, "closed-loop clients each ordering a product of its own")
	fs.IntVar(&c.popular, "popular", 300, "closed-loop clients all ordering one popular product")
	fs.Int64Var(&c.stock, "stock", 1_000_000_000, "units seeded of every product: more than the run can sell")
	fs.DurationVar(&c.duration, "duration", 8*time.Second, "the measured window")
	fs.DurationVar(&c.warmup, "warmup", 2*time.Second, "load before the window, not measured")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Second, "a client waits this long for an answer, then counts a timeout and sends a new request with a new key")
	fs.DurationVar(&c.settle, "settle", 20*time.Second, "after the load, the longest wait for the instances to have answered every request sent (their /metrics), before the check")
	fs.StringVar(&c.label, "label", "", "the run's name in the report, MODE/SHAPE (e.g. auto/mixed) for the summary's comparison with off")
	fs.StringVar(&c.jsonPath, "json", "", "write the figures to this file as JSON")
	if err := fs.Parse(args); err != nil {
		return c, usageError{err}
	}
	if fs.NArg() > 0 {
		return c, usageError{fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	if secret == "" {
		secret = getenv(envJWTSecret)
	}
	if c.databaseURL == "" {
		c.databaseURL = getenv(envDatabaseURL)
	}
	c.jwtSecret = []byte(secret)
	var err error
	c.urls, err = parseURLs(urls)
	if err = errors.Join(err, c.check()); err != nil {
		return c, usageError{err}
	}
	return c, nil
}

// check refuses settings out of range; no message carries a secret.
func (c config) check() error {
	var errs []error
	if len(c.jwtSecret) < auth.MinSecretLen {
		errs = append(errs, fmt.Errorf("the JWT secret (-jwt-secret or $%s) must be at least %d bytes", envJWTSecret, auth.MinSecretLen))
	}
	if c.databaseURL == "" {
		errs = append(errs, fmt.Errorf("the database URL (-database-url or $%s) is empty", envDatabaseURL))
	}
	if c.distinct < 0 || c.popular < 0 || c.distinct > maxClients || c.popular > maxClients {
		errs = append(errs, fmt.Errorf("-distinct (%d) and -popular (%d) must be 0 to %d", c.distinct, c.popular, maxClients))
	} else if c.distinct+c.popular == 0 {
		errs = append(errs, errors.New("-distinct and -popular are both 0: no load"))
	}
	if c.stock < 1 {
		errs = append(errs, fmt.Errorf("-stock must be positive, got %d", c.stock))
	}
	if c.duration <= 0 || c.duration > maxDuration {
		errs = append(errs, fmt.Errorf("-duration must be above 0 and at most %v, got %v", maxDuration, c.duration))
	}
	if c.warmup < 0 || c.warmup > maxDuration {
		errs = append(errs, fmt.Errorf("-warmup must be 0 to %v, got %v", maxDuration, c.warmup))
	}
	if c.timeout <= 0 || c.timeout > time.Minute {
		errs = append(errs, fmt.Errorf("-timeout must be above 0 and at most 1m, got %v", c.timeout))
	}
	if c.settle < 0 || c.settle > maxSettle {
		errs = append(errs, fmt.Errorf("-settle must be 0 to %v, got %v", maxSettle, c.settle))
	}
	if len(c.label) > maxLabel || strings.ContainsAny(c.label, "|\n") {
		errs = append(errs, fmt.Errorf("-label must be at most %d characters, without | or a newline", maxLabel))
	}
	return errors.Join(errs...)
}

// parseURLs splits the comma-separated base URLs and checks that each is
// http on a loopback host with a port: the load goes nowhere else.
func parseURLs(s string) ([]string, error) {
	var out []string
	for _, raw := range strings.Split(s, ",") {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		u, err := url.Parse(raw)
		if err != nil || u.Scheme != "http" || u.Port() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			return nil, fmt.Errorf("-urls: %q is not a base URL http://HOST:PORT", raw)
		}
		if !isLoopback(u.Hostname()) {
			return nil, fmt.Errorf("-urls: %q is not on loopback: the load goes only to this machine", raw)
		}
		out = append(out, "http://"+u.Host)
	}
	if len(out) == 0 {
		return nil, errors.New("-urls is empty: give the base URL of every ordersd instance")
	}
	return out, nil
}

// isLoopback reports whether host is localhost or a loopback address.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
