// Package ordersenv reads the ORDERS_* settings that ordersd and quorumctl
// share, so that the operator's tool talks to exactly the masters and the
// database the service uses, with the same rules: the Redis masters and
// their credentials and TLS, the database URL, the lock TTL that is also
// the restart guard's window, and secrets taken from the environment or
// from a file, never from a flag.
//
// Errors name the variable and never carry a secret's value; each wraps
// ErrInvalid.
package ordersenv

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// The environment variables both commands read.
const (
	VarRedisAddrs     = "ORDERS_REDIS_ADDRS"       // comma-separated HOST:PORT of the masters
	VarRedisUsername  = "ORDERS_REDIS_USERNAME"    // the ACL user of every master
	VarRedisPassword  = "ORDERS_REDIS_PASSWORD"    // a secret (or ORDERS_REDIS_PASSWORD_FILE)
	VarRedisTLS       = "ORDERS_REDIS_TLS"         // true: talk TLS to the masters
	VarRedisTLSCAFile = "ORDERS_REDIS_TLS_CA_FILE" // the CA of the masters' certificates
	VarRedisDurable   = "ORDERS_REDIS_DURABLE"     // the masters fsync every write
	VarDatabaseURL    = "ORDERS_DATABASE_URL"      // a secret (or ORDERS_DATABASE_URL_FILE)
	VarLockTTL        = "ORDERS_LOCK_TTL"          // the stock lock's TTL and the guard's window
	VarNodeTimeout    = "ORDERS_NODE_TIMEOUT"      // the lock's per-node timeout (0: its default)
)

// DefaultLockTTL is ordersd's stock lock TTL when ORDERS_LOCK_TTL is unset.
// The restart guard keeps a restarted master from voting for that long.
const DefaultLockTTL = 5 * time.Second

// FileSuffix names the variable that holds a secret's file: ORDERS_X_FILE
// for ORDERS_X.
const FileSuffix = "_FILE"

// ErrInvalid is wrapped by every error of this package.
var ErrInvalid = errors.New("invalid configuration")

// Lookup reads one environment variable; os.LookupEnv is one.
type Lookup func(name string) (string, bool)

// Secret returns the secret name: the content of the file named by
// name_FILE when that is set (trailing newlines cut), else the variable
// itself ("" when neither is set). Setting both is an error. Errors name
// the variables and the file, never the value.
func Secret(env Lookup, name string) (string, error) {
	v, inEnv := env(name)
	path, inFile := env(name + FileSuffix)
	switch {
	case inEnv && inFile:
		return "", fmt.Errorf("%w: %s and %s%s are both set: set one", ErrInvalid, name, name, FileSuffix)
	case inFile:
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("%w: %s%s: %w", ErrInvalid, name, FileSuffix, err)
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	}
	return v, nil
}

// RedisAddrs splits a comma-separated list of masters, HOST:PORT each. It
// refuses an empty list, an address without a valid port, and an address
// named twice (two votes from one master would break the majority).
func RedisAddrs(list string) ([]string, error) {
	var out []string
	var errs []error
	seen := map[string]bool{}
	for _, a := range strings.Split(list, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		_, port, err := net.SplitHostPort(a)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: %s entry %q: %w", ErrInvalid, VarRedisAddrs, a, err))
			continue
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			errs = append(errs, fmt.Errorf("%w: %s entry %q: port %q is not a number in 1-65535", ErrInvalid, VarRedisAddrs, a, port))
			continue
		}
		if seen[a] {
			errs = append(errs, fmt.Errorf("%w: %s names %s twice", ErrInvalid, VarRedisAddrs, a))
			continue
		}
		seen[a] = true
		out = append(out, a)
	}
	if len(out) == 0 && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("%w: %s is empty: give the Redis masters, HOST:PORT[,HOST:PORT...]", ErrInvalid, VarRedisAddrs))
	}
	return out, errors.Join(errs...)
}

// RedisTLS is the TLS configuration of the Redis clients: TLS 1.2 or
// later, the masters verified against the system roots, or against the CA
// in caFile when it is not empty.
func RedisTLS(caFile string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile == "" {
		return tc, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, VarRedisTLSCAFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w: %s %s: no PEM certificate in it", ErrInvalid, VarRedisTLSCAFile, caFile)
	}
	tc.RootCAs = pool
	return tc, nil
}

// Bool parses a true/false variable's value v, naming the variable when it
// is neither.
func Bool(name, v string) (bool, error) {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%w: %s=%q: want true or false", ErrInvalid, name, v)
	}
	return b, nil
}

// Duration parses a duration variable's value v ("5s", "1m"), naming the
// variable when it does not parse.
func Duration(name, v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%w: %s=%q: %w", ErrInvalid, name, v, err)
	}
	return d, nil
}
