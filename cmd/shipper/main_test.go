package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/ordersenv"
	"github.com/quorumlock/quorumlock/orders/events"
)

// The secrets of the tests' environments: no error may show them.
const (
	dbPassword    = "db-pass-5ecret"
	redisPassword = "redis-pass-5ecret"
)

func lookup(m map[string]string) ordersenv.Lookup {
	return func(name string) (string, bool) { v, ok := m[name]; return v, ok }
}

// minimal is the smallest valid environment.
func minimal() map[string]string {
	return map[string]string{
		"ORDERS_DATABASE_URL": "postgres://orders:" + dbPassword + "@127.0.0.1:5432/orders",
		"ORDERS_REDIS_ADDRS":  "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003",
	}
}

func TestShipperConfigDefaults(t *testing.T) {
	c, err := parseConfig(lookup(minimal()))
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	want := config{
		databaseURL: secret(minimal()["ORDERS_DATABASE_URL"]),
		eventsAddr:  "127.0.0.1:7001", // the first master
		stream:      events.DefaultStream,
		group:       "shipper",
		name:        fmt.Sprintf("%s-%d", host, os.Getpid()),
		claimIdle:   events.DefaultClaimIdle,
		lease:       events.DefaultLease,
		window:      events.DefaultWindow,
		listen:      "127.0.0.1:8091",
		logFormat:   "text",
		logLevel:    slog.LevelInfo,
	}
	if c != want || c.databaseURL.reveal() != minimal()["ORDERS_DATABASE_URL"] {
		t.Fatalf("config\n got %v\nwant %v", c, want)
	}
	if c.block() != events.DefaultBlock {
		t.Fatalf("read block %v, want the default %v", c.block(), events.DefaultBlock)
	}
}

func TestShipperConfigFromEnvironment(t *testing.T) {
	dir := t.TempDir()
	dbFile, pwFile := filepath.Join(dir, "db"), filepath.Join(dir, "pw")
	if err := os.WriteFile(dbFile, []byte("postgres://u:"+dbPassword+"@db:5432/orders\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pwFile, []byte(redisPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"ORDERS_DATABASE_URL_FILE":   dbFile,
		"ORDERS_REDIS_ADDRS":         "127.0.0.1:7001", // not used: the events address wins
		"ORDERS_EVENTS_REDIS_ADDR":   "events:6380",
		"ORDERS_REDIS_USERNAME":      "shipper",
		"ORDERS_REDIS_PASSWORD_FILE": pwFile,
		"ORDERS_REDIS_TLS":           "true",
		"ORDERS_EVENTS_STREAM":       "test:events",
		"SHIPPER_GROUP":              "shipper-eu",
		"SHIPPER_NAME":               "shipper-1",
		"SHIPPER_CLAIM_IDLE":         "400ms",
		"SHIPPER_LEASE":              "5s",
		"SHIPPER_DEDUP_WINDOW":       "1h",
		"SHIPPER_LISTEN":             "0.0.0.0:9000",
		"ORDERS_LOG_FORMAT":          "json",
		"ORDERS_LOG_LEVEL":           "debug",
	}
	c, err := parseConfig(lookup(env))
	if err != nil {
		t.Fatal(err)
	}
	if c.databaseURL.reveal() != "postgres://u:"+dbPassword+"@db:5432/orders" || c.redisPassword.reveal() != redisPassword ||
		c.eventsAddr != "events:6380" || c.redisUser != "shipper" || c.redisTLS == nil || c.stream != "test:events" ||
		c.group != "shipper-eu" || c.name != "shipper-1" || c.claimIdle != 400*time.Millisecond || c.lease != 5*time.Second ||
		c.window != time.Hour || c.listen != "0.0.0.0:9000" || c.logFormat != "json" || c.logLevel != slog.LevelDebug {
		t.Fatalf("config %+v", c)
	}
	if c.block() != 200*time.Millisecond {
		t.Fatalf("read block %v with a claim idle of 400ms, want half of it", c.block())
	}
	// The events address alone is enough: ORDERS_REDIS_ADDRS is ordersd's.
	delete(env, "ORDERS_REDIS_ADDRS")
	if _, err := parseConfig(lookup(env)); err != nil {
		t.Fatalf("without ORDERS_REDIS_ADDRS: %v", err)
	}
}

// TestShipperBadConfigIsRefused: each bad setting is refused with an error that
// names its variable and shows no secret.
func TestShipperBadConfigIsRefused(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	cases := map[string]struct {
		set     map[string]string
		unset   []string
		mention string
	}{
		"no database":        {unset: []string{"ORDERS_DATABASE_URL"}, mention: "ORDERS_DATABASE_URL"},
		"bad database url":   {set: map[string]string{"ORDERS_DATABASE_URL": "postgres://u:" + dbPassword + "@db:port/x"}, mention: "ORDERS_DATABASE_URL"},
		"database twice":     {set: map[string]string{"ORDERS_DATABASE_URL_FILE": "/etc/hostname"}, mention: "ORDERS_DATABASE_URL and ORDERS_DATABASE_URL_FILE"},
		"no database file":   {set: map[string]string{"ORDERS_DATABASE_URL_FILE": missing}, unset: []string{"ORDERS_DATABASE_URL"}, mention: "ORDERS_DATABASE_URL_FILE"},
		"no redis":           {unset: []string{"ORDERS_REDIS_ADDRS"}, mention: "ORDERS_EVENTS_REDIS_ADDR and ORDERS_REDIS_ADDRS"},
		"bad redis list":     {set: map[string]string{"ORDERS_REDIS_ADDRS": "localhost"}, mention: "ORDERS_REDIS_ADDRS"},
		"bad events addr":    {set: map[string]string{"ORDERS_EVENTS_REDIS_ADDR": "redis"}, mention: "ORDERS_EVENTS_REDIS_ADDR"},
		"bad events port":    {set: map[string]string{"ORDERS_EVENTS_REDIS_ADDR": "redis:0"}, mention: "ORDERS_EVENTS_REDIS_ADDR"},
		"password twice":     {set: map[string]string{"ORDERS_REDIS_PASSWORD": redisPassword, "ORDERS_REDIS_PASSWORD_FILE": "/etc/hostname"}, mention: "ORDERS_REDIS_PASSWORD and ORDERS_REDIS_PASSWORD_FILE"},
		"bad tls":            {set: map[string]string{"ORDERS_REDIS_TLS": "maybe"}, mention: "ORDERS_REDIS_TLS"},
		"no ca file":         {set: map[string]string{"ORDERS_REDIS_TLS_CA_FILE": missing}, mention: "ORDERS_REDIS_TLS_CA_FILE"},
		"empty stream":       {set: map[string]string{"ORDERS_EVENTS_STREAM": ""}, mention: "ORDERS_EVENTS_STREAM"},
		"empty group":        {set: map[string]string{"SHIPPER_GROUP": ""}, mention: "SHIPPER_GROUP"},
		"group with braces":  {set: map[string]string{"SHIPPER_GROUP": "ship{1}"}, mention: "SHIPPER_GROUP"},
		"name with spaces":   {set: map[string]string{"SHIPPER_NAME": "shipper one"}, mention: "SHIPPER_NAME"},
		"bad claim idle":     {set: map[string]string{"SHIPPER_CLAIM_IDLE": "soon"}, mention: "SHIPPER_CLAIM_IDLE"},
		"zero claim idle":    {set: map[string]string{"SHIPPER_CLAIM_IDLE": "0s"}, mention: "SHIPPER_CLAIM_IDLE must be positive"},
		"tiny claim idle":    {set: map[string]string{"SHIPPER_CLAIM_IDLE": "1ms"}, mention: "SHIPPER_CLAIM_IDLE must be at least"},
		"negative lease":     {set: map[string]string{"SHIPPER_LEASE": "-1s"}, mention: "SHIPPER_LEASE must be positive"},
		"bad window":         {set: map[string]string{"SHIPPER_DEDUP_WINDOW": "a day"}, mention: "SHIPPER_DEDUP_WINDOW"},
		"zero window":        {set: map[string]string{"SHIPPER_DEDUP_WINDOW": "0s"}, mention: "SHIPPER_DEDUP_WINDOW must be positive"},
		"bad listen":         {set: map[string]string{"SHIPPER_LISTEN": "8091"}, mention: "SHIPPER_LISTEN"},
		"bad log format":     {set: map[string]string{"ORDERS_LOG_FORMAT": "xml"}, mention: "ORDERS_LOG_FORMAT"},
		"bad log level":      {set: map[string]string{"ORDERS_LOG_LEVEL": "loud"}, mention: "ORDERS_LOG_LEVEL"},
		"redis password set": {set: map[string]string{"ORDERS_REDIS_PASSWORD": redisPassword, "SHIPPER_LISTEN": "x"}, mention: "SHIPPER_LISTEN"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			env := minimal()
			for _, k := range c.unset {
				delete(env, k)
			}
			for k, v := range c.set {
				env[k] = v
			}
			_, err := parseConfig(lookup(env))
			if err == nil {
				t.Fatalf("accepted %v", c.set)
			}
			if !strings.Contains(err.Error(), c.mention) {
				t.Fatalf("error %q does not mention %q", err, c.mention)
			}
			if strings.Contains(err.Error(), dbPassword) || strings.Contains(err.Error(), redisPassword) {
				t.Fatalf("the error shows a secret: %v", err)
			}
		})
	}
}

// Every problem is reported at once.
func TestShipperBadConfigReportsEveryProblem(t *testing.T) {
	env := minimal()
	env["SHIPPER_CLAIM_IDLE"] = "x"
	env["SHIPPER_LISTEN"] = "y"
	env["ORDERS_LOG_FORMAT"] = "z"
	_, err := parseConfig(lookup(env))
	for _, v := range []string{"SHIPPER_CLAIM_IDLE", "SHIPPER_LISTEN", "ORDERS_LOG_FORMAT"} {
		if err == nil || !strings.Contains(err.Error(), v) {
			t.Errorf("error %v does not name %s", err, v)
		}
	}
}

// The secrets never show when the configuration is printed or logged.
func TestShipperSecretsAreNotPrinted(t *testing.T) {
	env := minimal()
	env["ORDERS_REDIS_PASSWORD"] = redisPassword
	c, err := parseConfig(lookup(env))
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("config", "url", c.databaseURL, "password", c.redisPassword, "config", c)
	slog.New(slog.NewTextHandler(&logged, nil)).Info("config", "url", c.databaseURL, "password", c.redisPassword, "config", c)
	for _, s := range []string{fmt.Sprintf("%v %+v %#v %s %v %+v", c, c, c, c.databaseURL, &c, []config{c}), logged.String()} {
		if strings.Contains(s, dbPassword) || strings.Contains(s, redisPassword) {
			t.Fatalf("a secret shows in %q", s)
		}
	}
}

// run refuses a bad configuration before it connects to anything, and
// with the variable named.
func TestShipperRunRefusesBadConfig(t *testing.T) {
	env := minimal()
	env["SHIPPER_DEDUP_WINDOW"] = "forever"
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), nil, lookup(env), &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "SHIPPER_DEDUP_WINDOW") || strings.Contains(err.Error(), dbPassword) {
		t.Fatalf("run: %v", err)
	}
	if stdout.Len()+stderr.Len() != 0 {
		t.Fatalf("run printed %q %q", stdout.String(), stderr.String())
	}
}

func TestShipperRunArguments(t *testing.T) {
	var stdout bytes.Buffer
	if err := run(context.Background(), []string{"-h"}, lookup(nil), &stdout, &stdout); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"ORDERS_DATABASE_URL", "SHIPPER_GROUP", "SHIPPER_NAME", "SHIPPER_CLAIM_IDLE", "SHIPPER_DEDUP_WINDOW", "SHIPPER_LISTEN"} {
		if !strings.Contains(stdout.String(), v) {
			t.Errorf("usage does not mention %s", v)
		}
	}
	if err := run(context.Background(), []string{"-group", "x"}, lookup(minimal()), &stdout, &stdout); err == nil || !strings.Contains(err.Error(), "environment") {
		t.Fatalf("flags: %v", err)
	}
}
