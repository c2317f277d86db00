package quorum_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/quorum"
)

// offlineClients returns clients that are never dialled: New only inspects
// them.
func offlineClients(t *testing.T, n int) []redis.UniversalClient {
	t.Helper()
	cs := make([]redis.UniversalClient, n)
	for i := range cs {
		c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", 10000+i)})
		t.Cleanup(func() { _ = c.Close() })
		cs[i] = c
	}
	return cs
}

func TestNewRejectsBadConfig(t *testing.T) {
	five := offlineClients(t, 5)
	same := offlineClients(t, 3)
	same[2] = same[0]
	var nilClient *redis.Client
	sameAddr := offlineClients(t, 2)
	twin := redis.NewClient(&redis.Options{Addr: sameAddr[0].(*redis.Client).Options().Addr})
	t.Cleanup(func() { _ = twin.Close() })
	sameAddr = append(sameAddr, twin)
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { _ = cluster.Close() })

	cases := []struct {
		name  string
		nodes []redis.UniversalClient
		opts  []quorum.Option
		want  string
	}{
		{"no nodes", nil, nil, "no nodes"},
		{"empty nodes", []redis.UniversalClient{}, nil, "no nodes"},
		{"nil interface", []redis.UniversalClient{five[0], nil, five[2]}, nil, "nodes[1] is nil"},
		{"nil pointer", []redis.UniversalClient{five[0], nilClient, five[2]}, nil, "nodes[1] is nil"},
		{"same client twice", same, nil, "nodes[2] is the same client as nodes[0]"},
		{"same address twice", sameAddr, nil, "nodes[2] and nodes[0] both address"},
		{"cluster with guard", []redis.UniversalClient{five[0], cluster, five[2]}, nil, "ClusterClient"},
		{"zero ttl", five, []quorum.Option{quorum.WithTTL(0)}, "TTL must be at least 10ms"},
		{"negative ttl", five, []quorum.Option{quorum.WithTTL(-time.Second)}, "TTL must be at least 10ms"},
		{"negative drift", five, []quorum.Option{quorum.WithDriftFactor(-0.1)}, "drift factor"},
		{"drift one half", five, []quorum.Option{quorum.WithDriftFactor(0.5)}, "drift factor"},
		{"drift NaN", five, []quorum.Option{quorum.WithDriftFactor(math.NaN())}, "drift factor"},
		{"zero node timeout", five, []quorum.Option{quorum.WithNodeTimeout(0)}, "node timeout must be > 0"},
		{"node timeout = ttl", five, []quorum.Option{quorum.WithTTL(time.Second), quorum.WithNodeTimeout(time.Second)}, "shorter than the TTL"},
		{"node timeout eats validity", five, []quorum.Option{quorum.WithTTL(time.Second), quorum.WithNodeTimeout(495 * time.Millisecond)}, "too short for the node timeout"},
		{"negative attempts", five, []quorum.Option{quorum.WithRetry(quorum.Retry{Attempts: -1, BaseDelay: time.Millisecond, MaxDelay: time.Second})}, "attempts must be >= 0"},
		{"zero base delay", five, []quorum.Option{quorum.WithRetry(quorum.Retry{Attempts: 3, MaxDelay: time.Second})}, "base delay must be > 0"},
		{"max below base", five, []quorum.Option{quorum.WithRetry(quorum.Retry{Attempts: 3, BaseDelay: time.Second, MaxDelay: time.Millisecond})}, "max delay"},
		{"unbounded retry", five, []quorum.Option{quorum.WithMaxWait(0), quorum.WithRetry(quorum.Retry{BaseDelay: time.Millisecond, MaxDelay: time.Second})}, "unbounded"},
		{"negative max wait", five, []quorum.Option{quorum.WithMaxWait(-time.Second)}, "max wait"},
		{"nil fencer", five, []quorum.Option{quorum.WithFencer(nil)}, "fencer is nil"},
		{"nil observer", five, []quorum.Option{quorum.WithObserver(nil)}, "observer is nil"},
		{"nil option", five, []quorum.Option{nil}, "option 0 is nil"},
		{"window below ttl", five, []quorum.Option{quorum.WithTTL(time.Second), quorum.WithAmnesiaWindow(500 * time.Millisecond)}, "exceeds the restart window"},
		{"negative safety margin", five, []quorum.Option{quorum.WithSafetyMargin(-time.Millisecond)}, "safety margin must be >= 0"},
		{"margin eats the watchdog", five, []quorum.Option{quorum.WithTTL(time.Second), quorum.WithSafetyMargin(900 * time.Millisecond)}, "plus safety margin"},
		{"zero watchdog", five, []quorum.Option{quorum.WithWatchdogInterval(0)}, "watchdog interval must be > 0"},
		{"watchdog too slow", five, []quorum.Option{quorum.WithTTL(time.Second), quorum.WithWatchdogInterval(990 * time.Millisecond)}, "leaves no time to extend"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, err := quorum.New(c.nodes, c.opts...)
			if err == nil {
				t.Fatalf("New accepted it: %v", l)
			}
			if l != nil {
				t.Fatal("New returned a Locker with an error")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not mention %q", err, c.want)
			}
		})
	}
}

// Every problem is named at once, not just the first.
func TestNewListsAllProblems(t *testing.T) {
	_, err := quorum.New(offlineClients(t, 3), quorum.WithDriftFactor(2), quorum.WithFencer(nil), quorum.WithObserver(nil))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"drift factor", "fencer is nil", "observer is nil"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestNewAcceptsValidConfig(t *testing.T) {
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { _ = cluster.Close() })
	cases := map[string]struct {
		nodes []redis.UniversalClient
		opts  []quorum.Option
	}{
		"defaults":              {offlineClients(t, 5), nil},
		"one node":              {offlineClients(t, 1), nil},
		"short ttl":             {offlineClients(t, 3), []quorum.Option{quorum.WithTTL(100 * time.Millisecond)}},
		"everything":            {offlineClients(t, 5), []quorum.Option{quorum.WithTTL(2 * time.Second), quorum.WithNodeTimeout(20 * time.Millisecond), quorum.WithDriftFactor(0.02), quorum.WithRetry(quorum.Retry{Attempts: 5, BaseDelay: time.Millisecond, MaxDelay: 50 * time.Millisecond}), quorum.WithMaxWait(0), quorum.WithAmnesiaWindow(5 * time.Second), quorum.WithWatchdogInterval(500 * time.Millisecond), quorum.WithSafetyMargin(200 * time.Millisecond), quorum.WithDurableNodes(true), quorum.WithObserver(lease.NopObserver{})}},
		"cluster without guard": {[]redis.UniversalClient{cluster}, []quorum.Option{quorum.WithAmnesiaGuard(false)}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			l, err := quorum.New(c.nodes, c.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if l == nil {
				t.Fatal("nil Locker")
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
	l, err := quorum.New(offlineClients(t, 3), quorum.WithTTL(15*time.Millisecond+500*time.Microsecond))
	if err != nil {
		t.Fatal(err)
	}
	if got := l.TTL(); got != 15*time.Millisecond {
		t.Fatalf("TTL() = %v, want 15ms", got)
	}
	_ = l.Close()
}

// Sentinel failover clients all report the address "FailoverClient":
// distinct masters behind Sentinel are not duplicates, the same client
// given twice still is.
func TestNewAcceptsDistinctFailoverClients(t *testing.T) {
	var nodes []redis.UniversalClient
	for _, m := range []string{"m1", "m2", "m3"} {
		c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: m, SentinelAddrs: []string{"127.0.0.1:1"}, MaxRetries: -1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		nodes = append(nodes, c)
	}
	l, err := quorum.New(nodes)
	if err != nil {
		t.Fatalf("distinct failover clients rejected: %v", err)
	}
	_ = l.Close()
	if _, err := quorum.New([]redis.UniversalClient{nodes[0], nodes[1], nodes[0]}); err == nil || !strings.Contains(err.Error(), "same client") {
		t.Fatalf("the same failover client twice: %v", err)
	}
	// A failover client that would let a request outlive its deadline
	// cannot be replaced by a copy (the copy would not follow failovers):
	// New says what to set.
	retrying := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m4", SentinelAddrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { _ = retrying.Close() })
	if _, err := quorum.New([]redis.UniversalClient{nodes[0], nodes[1], retrying}); err == nil || !strings.Contains(err.Error(), "ContextTimeoutEnabled: true and MaxRetries: -1") {
		t.Fatalf("a failover client with retries: %v", err)
	}
}

// After Close, Lock, TryLock and Do fail at once with lease.ErrClosed, and Close
// may be called again.
func TestClose(t *testing.T) {
	l, err := quorum.New(offlineClients(t, 3))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	start := time.Now()
	if _, err := l.Lock(ctx, "k"); !errors.Is(err, lease.ErrClosed) {
		t.Fatalf("Lock after Close: %v", err)
	}
	if _, err := l.TryLock(ctx, "k"); !errors.Is(err, lease.ErrClosed) {
		t.Fatalf("TryLock after Close: %v", err)
	}
	if err := l.Do(ctx, "k", func(context.Context, lease.Lease) error { return nil }); !errors.Is(err, lease.ErrClosed) {
		t.Fatalf("Do after Close: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("calls after Close took %v", d)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
