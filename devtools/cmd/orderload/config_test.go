package main

import (
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

func parseWith(args []string, env map[string]string) (config, error) {
	return parseConfig(args, func(k string) string { return env[k] }, io.Discard)
}

var goodEnv = map[string]string{envJWTSecret: strings.Repeat("x", 32), envDatabaseURL: "postgres://u:p@127.0.0.1:5432/db"}

func TestParseConfigDefaults(t *testing.T) {
	c, err := parseWith([]string{"-urls", "http://127.0.0.1:8081, http://localhost:8082/,http://[::1]:8083"}, goodEnv)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.urls, []string{"http://127.0.0.1:8081", "http://localhost:8082", "http://[::1]:8083"}) {
		t.Fatalf("urls %q", c.urls)
	}
	if c.distinct != 66 || c.popular != 300 || c.duration != 8*time.Second || c.warmup != 2*time.Second ||
		c.timeout != 2*time.Second || c.stock != 1_000_000_000 || string(c.jwtSecret) != goodEnv[envJWTSecret] ||
		c.databaseURL != goodEnv[envDatabaseURL] || c.jsonPath != "" {
		t.Fatalf("defaults: %+v", c)
	}
	c, err = parseWith([]string{"-urls", "http://127.0.0.1:1", "-distinct", "0", "-popular", "5", "-duration", "1s", "-warmup", "0",
		"-timeout", "500ms", "-jwt-secret", strings.Repeat("y", 40), "-database-url", "postgres://other", "-label", "auto/mixed", "-json", "x.json"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.distinct != 0 || c.popular != 5 || c.duration != time.Second || c.warmup != 0 || c.timeout != 500*time.Millisecond ||
		len(c.jwtSecret) != 40 || c.databaseURL != "postgres://other" || c.label != "auto/mixed" || c.jsonPath != "x.json" {
		t.Fatalf("flags: %+v", c)
	}
}

// TestParseConfigRefuses: every bad setting is a usage error naming it,
// and no message carries a secret.
func TestParseConfigRefuses(t *testing.T) {
	url := []string{"-urls", "http://127.0.0.1:8080"}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, goodEnv, "-urls is empty"},
		{[]string{"-urls", "http://192.0.2.1:8080"}, goodEnv, "not on loopback"},
		{[]string{"-urls", "http://example.com:8080"}, goodEnv, "not on loopback"},
		{[]string{"-urls", "https://127.0.0.1:8080"}, goodEnv, "not a base URL"},
		{[]string{"-urls", "http://127.0.0.1"}, goodEnv, "not a base URL"},
		{[]string{"-urls", "http://127.0.0.1:8080/orders"}, goodEnv, "not a base URL"},
		{[]string{"-urls", "http://u:pw@127.0.0.1:8080"}, goodEnv, "not a base URL"},
		{url, map[string]string{envDatabaseURL: "postgres://x"}, "JWT secret"},
		{url, map[string]string{envJWTSecret: "short", envDatabaseURL: "postgres://x"}, "JWT secret"},
		{url, map[string]string{envJWTSecret: strings.Repeat("x", 32)}, "database URL"},
		{append(url, "-distinct", "0", "-popular", "0"), goodEnv, "no load"},
		{append(url, "-popular", "-3"), goodEnv, "-popular"},
		{append(url, "-distinct", "10001"), goodEnv, "-distinct"},
		{append(url, "-stock", "0"), goodEnv, "-stock"},
		{append(url, "-duration", "0"), goodEnv, "-duration"},
		{append(url, "-duration", "11m"), goodEnv, "-duration"},
		{append(url, "-warmup", "-1s"), goodEnv, "-warmup"},
		{append(url, "-timeout", "0"), goodEnv, "-timeout"},
		{append(url, "-settle", "3m"), goodEnv, "-settle"},
		{append(url, "-label", "a|b"), goodEnv, "-label"},
		{append(url, "extra"), goodEnv, "unexpected arguments"},
		{[]string{"-nope"}, goodEnv, "not defined"},
	} {
		_, err := parseWith(tc.args, tc.env)
		var ue usageError
		if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want a usage error with %q", tc.args, err, tc.want)
			continue
		}
		for _, s := range tc.env {
			if len(s) > 8 && strings.Contains(err.Error(), s) {
				t.Errorf("%q: the error carries a secret: %v", tc.args, err)
			}
		}
	}
}
