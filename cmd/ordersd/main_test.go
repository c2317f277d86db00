package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/orders/auth"
)

func validEnv(t *testing.T) {
	t.Setenv("ORDERS_LISTEN", "127.0.0.1:0")
	t.Setenv("ORDERS_REDIS_ADDRS", "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003")
	t.Setenv("ORDERS_DATABASE_URL", "postgres://u:p@127.0.0.1:5432/db")
	t.Setenv("ORDERS_JWT_SECRET", "0123456789abcdef0123")
}

func TestConfigFromEnvironment(t *testing.T) {
	validEnv(t)
	t.Setenv("ORDERS_LOCK_FALLBACK", "reject")
	t.Setenv("ORDERS_LOCK_TTL", "7s")
	t.Setenv("ORDERS_REDIS_DURABLE", "true")
	c, err := parseConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.redisAddrs) != 3 || c.fallback != "reject" || c.lockTTL != 7*time.Second || c.idemTTL != 24*time.Hour || !c.redisDurable {
		t.Fatalf("config %+v", c)
	}
	// Flags win over the environment.
	c, err = parseConfig([]string{"-lock-fallback", "db", "-lock-ttl", "3s"})
	if err != nil || c.fallback != "db" || c.lockTTL != 3*time.Second {
		t.Fatalf("flags: %+v %v", c, err)
	}
}

// TestBadConfigIsRefused: every bad setting is named in the error.
func TestBadConfigIsRefused(t *testing.T) {
	cases := map[string]struct{ env, val, mention string }{
		"no redis":        {"ORDERS_REDIS_ADDRS", "", "ORDERS_REDIS_ADDRS"},
		"duplicate redis": {"ORDERS_REDIS_ADDRS", "127.0.0.1:1,127.0.0.1:1", "twice"},
		"bad redis addr":  {"ORDERS_REDIS_ADDRS", "localhost", "ORDERS_REDIS_ADDRS"},
		"no database":     {"ORDERS_DATABASE_URL", "", "ORDERS_DATABASE_URL"},
		"short secret":    {"ORDERS_JWT_SECRET", "short", "ORDERS_JWT_SECRET"},
		"bad fallback":    {"ORDERS_LOCK_FALLBACK", "maybe", "fallback"},
		"bad duration":    {"ORDERS_LOCK_TTL", "five", "ORDERS_LOCK_TTL"},
		"zero ttl":        {"ORDERS_LOCK_TTL", "0s", "ORDERS_LOCK_TTL"},
		"lease over ttl":  {"ORDERS_PROCESSING_LEASE", "48h", "ORDERS_PROCESSING_LEASE"},
		"bad listen":      {"ORDERS_LISTEN", "8080", "ORDERS_LISTEN"},
		"bad durable":     {"ORDERS_REDIS_DURABLE", "maybe", "ORDERS_REDIS_DURABLE"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			validEnv(t)
			t.Setenv(c.env, c.val)
			_, err := parseConfig(nil)
			if err == nil || !strings.Contains(err.Error(), c.mention) {
				t.Fatalf("got %v, want an error naming %s", err, c.mention)
			}
		})
	}
}

func TestTokenSubcommand(t *testing.T) {
	t.Setenv("ORDERS_JWT_SECRET", "0123456789abcdef0123")
	var out bytes.Buffer
	if err := run(context.Background(), []string{"token", "-user", "u1001", "-ttl", "5m"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	v, err := auth.NewVerifier([]byte("0123456789abcdef0123"))
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
