package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/orders"
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
		"bad backend":      {"ORDERS_LOCK_BACKEND", "zookeeper", "ORDERS_LOCK_BACKEND"},
		"etcd, no members": {"ORDERS_LOCK_BACKEND", "etcd", "ORDERS_ETCD_ENDPOINTS"},
		"stray endpoints":  {"ORDERS_ETCD_ENDPOINTS", "127.0.0.1:2379", "ORDERS_LOCK_BACKEND is redlock"},
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
		"bad lock mode":    {"ORDERS_LOCK", "maybe", `ORDERS_LOCK "maybe": want auto, on or off`},
		"bad batch limit":  {"ORDERS_BATCH_LIMIT", "many", "ORDERS_BATCH_LIMIT=\"many\": want a whole number"},
		"zero batch limit": {"ORDERS_BATCH_LIMIT", "0", "ORDERS_BATCH_LIMIT must be 1 to"},
		"huge batch limit": {"ORDERS_BATCH_LIMIT", "100000", "ORDERS_BATCH_LIMIT must be 1 to"},
		"bad queue limit":  {"ORDERS_QUEUE_LIMIT", "lots", "ORDERS_QUEUE_LIMIT"},
		"zero queue limit": {"ORDERS_QUEUE_LIMIT", "0", "ORDERS_QUEUE_LIMIT must be at least 1"},
		"neg queue limit":  {"ORDERS_QUEUE_LIMIT", "-5", "ORDERS_QUEUE_LIMIT must be at least 1"},
		"bad queue wait":   {"ORDERS_QUEUE_WAIT", "soon", "ORDERS_QUEUE_WAIT"},
		"zero queue wait":  {"ORDERS_QUEUE_WAIT", "0s", "ORDERS_QUEUE_WAIT must be positive"},
		"neg queue wait":   {"ORDERS_QUEUE_WAIT", "-1s", "ORDERS_QUEUE_WAIT must be positive"},
		"bad recheck":      {"ORDERS_SOLDOUT_RECHECK", "1 sec", "ORDERS_SOLDOUT_RECHECK"},
		"zero recheck":     {"ORDERS_SOLDOUT_RECHECK", "0s", "ORDERS_SOLDOUT_RECHECK must be positive"},
		"neg recheck":      {"ORDERS_SOLDOUT_RECHECK", "-1s", "ORDERS_SOLDOUT_RECHECK must be positive"},
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

// TestLockAndQueueConfig: ORDERS_LOCK, the batch and queue bounds and the
// sold-out recheck: their defaults, the environment, the flags, and the
// queue wait's default following the lock wait.
func TestLockAndQueueConfig(t *testing.T) {
	validEnv(t)
	c, err := parseConfig(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !c.useLock || c.lockRule != orders.LockContended || c.batchLimit != orders.DefaultBatchLimit || c.queueLimit != orders.DefaultQueueLimit ||
		c.queueWait != 2*c.lockWait || c.soldOutRecheck != orders.DefaultSoldOutRecheck {
		t.Fatalf("defaults: lock %v, batch %d, queue %d/%v (lock wait %v), recheck %v", c.useLock, c.batchLimit, c.queueLimit, c.queueWait, c.lockWait, c.soldOutRecheck)
	}
	// The queue wait's default follows the lock wait, from either source.
	t.Setenv("ORDERS_LOCK_WAIT", "3s")
	if c, err = parseConfig(nil, io.Discard); err != nil || c.queueWait != 6*time.Second {
		t.Fatalf("queue wait with ORDERS_LOCK_WAIT=3s: %v, %v; want 6s", c.queueWait, err)
	}
	if c, err = parseConfig([]string{"-lock-wait", "1s"}, io.Discard); err != nil || c.queueWait != 2*time.Second {
		t.Fatalf("queue wait with -lock-wait 1s: %v, %v; want 2s", c.queueWait, err)
	}
	t.Setenv("ORDERS_LOCK", "off")
	t.Setenv("ORDERS_BATCH_LIMIT", "16")
	t.Setenv("ORDERS_QUEUE_LIMIT", "100")
	t.Setenv("ORDERS_QUEUE_WAIT", "7s")
	t.Setenv("ORDERS_SOLDOUT_RECHECK", "250ms")
	c, err = parseConfig(nil, io.Discard)
	if err != nil || c.useLock || c.batchLimit != 16 || c.queueLimit != 100 || c.queueWait != 7*time.Second || c.soldOutRecheck != 250*time.Millisecond {
		t.Fatalf("environment: %+v %v", c, err)
	}
	c, err = parseConfig([]string{"-lock", "on", "-batch-limit", "8", "-queue-limit", "9", "-queue-wait", "9s", "-soldout-recheck", "2s"}, io.Discard)
	if err != nil || !c.useLock || c.lockRule != orders.LockAlways || c.batchLimit != 8 || c.queueLimit != 9 || c.queueWait != 9*time.Second || c.soldOutRecheck != 2*time.Second {
		t.Fatalf("flags: %+v %v", c, err)
	}
	// The etcd backend: endpoints parsed and checked; none with the lock off.
	t.Setenv("ORDERS_LOCK_FALLBACK", "db")
	t.Setenv("ORDERS_LOCK_BACKEND", "etcd")
	t.Setenv("ORDERS_ETCD_ENDPOINTS", "127.0.0.1:2379, 127.0.0.1:2381")
	if c, err = parseConfig([]string{"-lock", "on"}, io.Discard); err != nil || c.lockBackend != "etcd" || len(c.etcdEndpoints) != 2 || c.etcdEndpoints[1] != "127.0.0.1:2381" {
		t.Fatalf("etcd backend: %+v %v", c.etcdEndpoints, err)
	}
	if _, err = parseConfig(nil, io.Discard); err == nil || !strings.Contains(err.Error(), "ORDERS_LOCK_BACKEND=etcd with ORDERS_LOCK=off") {
		t.Fatalf("etcd with the lock off: %v", err)
	}
	if _, err = parseConfig([]string{"-lock", "on", "-etcd-endpoints", "etcd-without-port"}, io.Discard); err == nil || !strings.Contains(err.Error(), "not host:port") {
		t.Fatalf("an endpoint without a port: %v", err)
	}
	t.Setenv("ORDERS_LOCK_BACKEND", "redlock")
	t.Setenv("ORDERS_ETCD_ENDPOINTS", "")
	// With the lock off, a reject fallback would refuse every order.
	t.Setenv("ORDERS_LOCK_FALLBACK", "reject")
	if _, err = parseConfig(nil, io.Discard); err == nil || !strings.Contains(err.Error(), "ORDERS_LOCK_FALLBACK=reject with ORDERS_LOCK=off") {
		t.Fatalf("lock off with the reject fallback: %v", err)
	}
}

// -h documents the new settings, and the queue wait's default as a rule
// rather than a number.
func TestLockAndQueueUsage(t *testing.T) {
	validEnv(t)
	var out strings.Builder
	if _, err := parseConfig([]string{"-h"}, &out); err == nil {
		t.Fatal("-h was accepted as a configuration")
	}
	for _, want := range []string{"(ORDERS_LOCK)", "(ORDERS_BATCH_LIMIT)", "(ORDERS_QUEUE_LIMIT)", "(ORDERS_SOLDOUT_RECHECK)",
		"default: twice ORDERS_LOCK_WAIT", "(ORDERS_QUEUE_WAIT)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-h lacks %q:\n%s", want, out.String())
		}
	}
}
