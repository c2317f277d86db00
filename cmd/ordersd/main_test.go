package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/orders"
	"github.com/quorumlock/quorumlock/orders/auth"
)

func validEnv(t *testing.T) {
	t.Setenv("ORDERS_LISTEN", "127.0.0.1:0")
	t.Setenv("ORDERS_REDIS_ADDRS", "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003")
	t.Setenv("ORDERS_DATABASE_URL", "postgres://u:p@127.0.0.1:5432/db")
	t.Setenv("ORDERS_JWT_SECRET", "0123456789abcdef0123456789abcdef")
	t.Setenv("ORDERS_PAYMENT_URL", "http://127.0.0.1:8090")
}

func TestConfigFromEnvironment(t *testing.T) {
	validEnv(t)
	t.Setenv("ORDERS_LOCK_FALLBACK", "reject")
	t.Setenv("ORDERS_LOCK_TTL", "7s")
	t.Setenv("ORDERS_REDIS_DURABLE", "true")
	t.Setenv("ORDERS_IDEMPOTENCY_CODES", "ietf")
	c, err := parseConfig(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.shutdownWait < c.idemLease || c.shutdownWait < c.payTimeout {
		t.Fatalf("default shutdown wait %v is shorter than a handler can take", c.shutdownWait)
	}
	if len(c.redisAddrs) != 3 || c.fallback != "reject" || c.lockTTL != 7*time.Second || c.idemTTL != 24*time.Hour || !c.redisDurable || c.codes != orders.CodesIETF {
		t.Fatalf("config %+v", c)
	}
	// Flags win over the environment.
	c, err = parseConfig([]string{"-lock-fallback", "db", "-lock-ttl", "3s"}, io.Discard)
	if err != nil || c.fallback != "db" || c.lockTTL != 3*time.Second {
		t.Fatalf("flags: %+v %v", c, err)
	}
}

// TestBadConfigIsRefused: every bad setting is named in the error.
func TestBadConfigIsRefused(t *testing.T) {
	cases := map[string]struct{ env, val, mention string }{
		"no redis":         {"ORDERS_REDIS_ADDRS", "", "ORDERS_REDIS_ADDRS"},
		"duplicate redis":  {"ORDERS_REDIS_ADDRS", "127.0.0.1:1,127.0.0.1:1", "twice"},
		"bad redis addr":   {"ORDERS_REDIS_ADDRS", "localhost", "ORDERS_REDIS_ADDRS"},
		"no database":      {"ORDERS_DATABASE_URL", "", "ORDERS_DATABASE_URL"},
		"short secret":     {"ORDERS_JWT_SECRET", "short", "ORDERS_JWT_SECRET"},
		"bad fallback":     {"ORDERS_LOCK_FALLBACK", "maybe", "fallback"},
		"bad codes":        {"ORDERS_IDEMPOTENCY_CODES", "rfc", "ORDERS_IDEMPOTENCY_CODES"},
		"bad duration":     {"ORDERS_LOCK_TTL", "five", "ORDERS_LOCK_TTL"},
		"zero ttl":         {"ORDERS_LOCK_TTL", "0s", "ORDERS_LOCK_TTL"},
		"lease over ttl":   {"ORDERS_PROCESSING_LEASE", "48h", "ORDERS_PROCESSING_LEASE"},
		"bad listen":       {"ORDERS_LISTEN", "8080", "ORDERS_LISTEN"},
		"bad durable":      {"ORDERS_REDIS_DURABLE", "maybe", "ORDERS_REDIS_DURABLE"},
		"no payment url":   {"ORDERS_PAYMENT_URL", "", "ORDERS_PAYMENT_URL"},
		"bad payment url":  {"ORDERS_PAYMENT_URL", "ftp://x", "ORDERS_PAYMENT_URL"},
		"short callback":   {"ORDERS_PAYMENT_CALLBACK_SECRET", "short", "ORDERS_PAYMENT_CALLBACK_SECRET"},
		"zero pay timeout": {"ORDERS_PAYMENT_TIMEOUT", "0s", "ORDERS_PAYMENT_TIMEOUT"},
		"zero hold":        {"ORDERS_ORDER_HOLD", "0s", "ORDERS_ORDER_HOLD"},
		"short shutdown":   {"ORDERS_SHUTDOWN_WAIT", "1s", "ORDERS_SHUTDOWN_WAIT"},
		"short retention":  {"ORDERS_OUTCOME_RETENTION", "1h", "ORDERS_OUTCOME_RETENTION"},
		"bad check every":  {"ORDERS_INVARIANT_INTERVAL", "hourly", "ORDERS_INVARIANT_INTERVAL"},
		"negative every":   {"ORDERS_INVARIANT_INTERVAL", "-1m", "ORDERS_INVARIANT_INTERVAL must not be negative"},
		"bad stuck age":    {"ORDERS_STUCK_PAYING_AFTER", "ten", "ORDERS_STUCK_PAYING_AFTER"},
		"zero stuck age":   {"ORDERS_STUCK_PAYING_AFTER", "0s", "ORDERS_STUCK_PAYING_AFTER must be positive"},
		"stuck age short":  {"ORDERS_STUCK_PAYING_AFTER", "30s", "ORDERS_STUCK_PAYING_AFTER (30s) must exceed"},
		"bad events addr":  {"ORDERS_EVENTS_REDIS_ADDR", "redis", "ORDERS_EVENTS_REDIS_ADDR"},
		"bad events len":   {"ORDERS_EVENTS_MAXLEN", "0", "ORDERS_EVENTS_MAXLEN"},
		"negative relay":   {"ORDERS_RELAY_INTERVAL", "-1s", "ORDERS_RELAY_INTERVAL must not be negative"},
		"zero retention":   {"ORDERS_OUTBOX_RETENTION", "0s", "ORDERS_OUTBOX_RETENTION must be positive"},
		"bad log format":   {"ORDERS_LOG_FORMAT", "xml", "ORDERS_LOG_FORMAT \"xml\": want text or json"},
		"bad log level":    {"ORDERS_LOG_LEVEL", "loud", "ORDERS_LOG_LEVEL \"loud\""},
		"bad redis port":   {"ORDERS_REDIS_ADDRS", "h:99999", "not a number in 1-65535"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			validEnv(t)
			t.Setenv(c.env, c.val)
			_, err := parseConfig(nil, io.Discard)
			if err == nil || !strings.Contains(err.Error(), c.mention) {
				t.Fatalf("got %v, want an error naming %s", err, c.mention)
			}
		})
	}
}

// TestInvariantWatchdogConfig: the watchdog's two settings, their
// defaults, the environment, the flags, and 0 turning it off.
func TestInvariantWatchdogConfig(t *testing.T) {
	validEnv(t)
	c, err := parseConfig(nil, io.Discard)
	if err != nil || c.invariantEvery != time.Minute || c.stuckPaying != 10*time.Minute {
		t.Fatalf("defaults: every %v, stuck after %v, %v; want 1m, 10m", c.invariantEvery, c.stuckPaying, err)
	}
	t.Setenv("ORDERS_INVARIANT_INTERVAL", "15s")
	t.Setenv("ORDERS_STUCK_PAYING_AFTER", "31s") // just over 2*(10s+5s)
	if c, err = parseConfig(nil, io.Discard); err != nil || c.invariantEvery != 15*time.Second || c.stuckPaying != 31*time.Second {
		t.Fatalf("environment: every %v, stuck after %v, %v", c.invariantEvery, c.stuckPaying, err)
	}
	c, err = parseConfig([]string{"-invariant-interval", "2m", "-stuck-paying-after", "1h"}, io.Discard)
	if err != nil || c.invariantEvery != 2*time.Minute || c.stuckPaying != time.Hour {
		t.Fatalf("flags: every %v, stuck after %v, %v", c.invariantEvery, c.stuckPaying, err)
	}
	// The bound follows the reconciler's settings.
	t.Setenv("ORDERS_PAYMENT_TIMEOUT", "20s")
	if _, err = parseConfig(nil, io.Discard); err == nil || !strings.Contains(err.Error(), "ORDERS_STUCK_PAYING_AFTER (31s) must exceed") {
		t.Fatalf("31s with a 20s payment timeout: %v", err)
	}
	// Off: the age no longer has to clear the reconciler, but must still
	// be a duration.
	t.Setenv("ORDERS_INVARIANT_INTERVAL", "0")
	if c, err = parseConfig(nil, io.Discard); err != nil || c.invariantEvery != 0 {
		t.Fatalf("off: every %v, %v", c.invariantEvery, err)
	}
	t.Setenv("ORDERS_STUCK_PAYING_AFTER", "-1s")
	if _, err = parseConfig(nil, io.Discard); err == nil || !strings.Contains(err.Error(), "ORDERS_STUCK_PAYING_AFTER") {
		t.Fatalf("off with a negative age: %v", err)
	}
}

func TestTokenSubcommand(t *testing.T) {
	t.Setenv("ORDERS_JWT_SECRET", "0123456789abcdef0123456789abcdef")
	var out bytes.Buffer
	if err := run(context.Background(), []string{"token", "-user", "u1001", "-ttl", "5m"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	v, err := auth.NewVerifier([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	user, err := v.Verify(context.Background(), "Bearer "+strings.TrimSpace(out.String()))
	if err != nil || user != "u1001" {
		t.Fatalf("minted token: %q %v", user, err)
	}
	if err := run(context.Background(), []string{"token", "-user", ""}, &out, &out); err == nil {
		t.Fatal("a token for no user was minted")
	}
	t.Setenv("ORDERS_JWT_SECRET", "weak")
	if err := run(context.Background(), []string{"token", "-user", "u1"}, &out, &out); err == nil {
		t.Fatal("a token was minted with a weak secret")
	}
}

func TestUnknownCommand(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"frobnicate"}, &out, &out); err == nil {
		t.Fatal("unknown command accepted")
	}
}

// The secrets never reach the output: not in -h, not on a mistyped flag,
// not in the errors of a bad configuration. And no flag takes them, since
// a flag's value shows in ps.
func TestSecretsAreNeverPrinted(t *testing.T) {
	const password = "s3cr3t-db-password"
	const jwtSecret = "jwt-secret-that-must-not-leak-0123456789"
	validEnv(t)
	t.Setenv("ORDERS_DATABASE_URL", "postgres://u:"+password+"@127.0.0.1:5432/db")
	t.Setenv("ORDERS_JWT_SECRET", jwtSecret)
	const callbackKey = "callback-secret-that-must-not-leak-0123"
	t.Setenv("ORDERS_PAYMENT_CALLBACK_SECRET", callbackKey)
	const redisPassword = "redis-password-that-must-not-leak"
	t.Setenv("ORDERS_REDIS_PASSWORD", redisPassword)
	for _, args := range [][]string{
		{"serve", "-h"},
		{"serve", "-listn", "x"},
		{"serve", "-jwt-secret", "x"},
		{"serve", "-database-url", "x"},
		{"serve", "-lock-ttl", "soon"},
		{"-h"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), args, &stdout, &stderr)
		if err == nil {
			t.Fatalf("%q: accepted", args)
		}
		out := stdout.String() + stderr.String() + err.Error()
		if strings.Contains(out, password) || strings.Contains(out, jwtSecret) || strings.Contains(out, callbackKey) || strings.Contains(out, redisPassword) {
			t.Fatalf("%q printed a secret:\n%s", args, out)
		}
		if args[len(args)-1] == "-h" && !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("%q: %v", args, err)
		}
		if args[len(args)-1] == "-h" && !strings.Contains(out, "ORDERS_JWT_SECRET_FILE") {
			t.Fatalf("-h does not say where the secrets come from:\n%s", out)
		}
	}
	// A configuration error names the variable, not its value.
	t.Setenv("ORDERS_LOCK_TTL", "0s")
	_, err := parseConfig(nil, io.Discard)
	if err == nil || strings.Contains(err.Error(), password) || strings.Contains(err.Error(), jwtSecret) {
		t.Fatalf("bad config: %v", err)
	}
}

// Secrets can come from files (ORDERS_*_FILE, as container secrets are
// mounted); a trailing newline is not part of the secret, and setting both
// the variable and its file is refused.
func TestSecretsFromFiles(t *testing.T) {
	validEnv(t)
	dir := t.TempDir()
	write := func(name, v string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	os.Unsetenv("ORDERS_DATABASE_URL")
	os.Unsetenv("ORDERS_JWT_SECRET")
	t.Setenv("ORDERS_DATABASE_URL_FILE", write("db", "postgres://u:p@127.0.0.1:5432/fromfile\n"))
	t.Setenv("ORDERS_JWT_SECRET_FILE", write("jwt", "0123456789abcdef0123456789abcdef\n"))
	c, err := parseConfig(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.databaseURL != "postgres://u:p@127.0.0.1:5432/fromfile" || c.jwtSecret != "0123456789abcdef0123456789abcdef" {
		t.Fatalf("from files: %q %q", c.databaseURL, c.jwtSecret)
	}
	t.Setenv("ORDERS_JWT_SECRET", "also-set-in-the-environment-0123456789")
	if _, err := parseConfig(nil, io.Discard); err == nil || !strings.Contains(err.Error(), "both set") {
		t.Fatalf("variable and file both set: %v", err)
	}
	os.Unsetenv("ORDERS_JWT_SECRET")
	t.Setenv("ORDERS_JWT_SECRET_FILE", filepath.Join(dir, "missing"))
	if _, err := parseConfig(nil, io.Discard); err == nil || !strings.Contains(err.Error(), "ORDERS_JWT_SECRET_FILE") {
		t.Fatalf("missing file: %v", err)
	}
}
