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

	"github.com/quorumlock/quorumlock/orders/auth"
)

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
