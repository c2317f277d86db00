package quorumprom_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/quorum"
	"github.com/quorumlock/quorumlock/quorum/quorumprom"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper"),
	)
}

func TestEventsBecomeMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	o, err := quorumprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	o.ObserveAcquire(lease.AcquireEvent{Key: "k", Attempts: 1, Duration: time.Millisecond, Result: lease.ResultAcquired})
	o.ObserveAcquire(lease.AcquireEvent{Key: "k", Attempts: 4, Duration: 30 * time.Millisecond, Result: lease.ResultNotAcquired, Err: lease.ErrNotAcquired})
	o.ObserveAcquire(lease.AcquireEvent{Key: "k", Attempts: 2, Duration: time.Second, Result: lease.ResultUnavailable, Err: lease.ErrQuorumUnavailable})
	o.ObserveNodeError(lease.NodeEvent{Op: "acquire", Key: "k", Node: 2, Addr: "10.0.0.3:6379", Err: context.DeadlineExceeded})
	o.ObserveNodeError(lease.NodeEvent{Op: "acquire", Key: "k", Node: 2, Addr: "10.0.0.3:6379", Err: context.DeadlineExceeded})
	o.ObserveNodeError(lease.NodeEvent{Op: "release", Key: "k", Node: 4, Err: errors.New("EOF")})
	o.ObserveExtend(lease.ExtendEvent{Key: "k", Duration: time.Millisecond, Confirmed: 5})
	o.ObserveExtend(lease.ExtendEvent{Key: "k", Duration: time.Millisecond, Confirmed: 1, Err: &quorum.QuorumError{Err: lease.ErrLeaseLost}})
	o.ObserveExtend(lease.ExtendEvent{Key: "k", Duration: time.Millisecond, Err: context.Canceled})
	o.ObserveExtend(lease.ExtendEvent{Key: "k", Duration: time.Millisecond, Confirmed: 2, Err: &quorum.QuorumError{Err: lease.ErrExtendUnconfirmed}})
	o.ObserveRelease(lease.ReleaseEvent{Key: "k", Released: 3, NotOwner: 1, Failed: 1})
	o.ObserveRelease(lease.ReleaseEvent{Key: "k", NotOwner: 5})
	o.ObserveLost(lease.LostEvent{Key: "k", Reason: lease.LostExpired, Held: 3 * time.Second})

	got := gather(t, reg)
	for series, want := range map[string]float64{
		`quorumlock_acquire_total{result="acquired"}`:                     1,
		`quorumlock_acquire_total{result="canceled"}`:                     0,
		`quorumlock_acquire_total{result="error"}`:                        0,
		`quorumlock_acquire_total{result="not_acquired"}`:                 1,
		`quorumlock_acquire_total{result="unavailable"}`:                  1,
		`quorumlock_node_errors_total{node="10.0.0.3:6379",op="acquire"}`: 2,
		`quorumlock_node_errors_total{node="4",op="release"}`:             1,
		`quorumlock_extend_total{result="canceled"}`:                      1,
		`quorumlock_extend_total{result="lost"}`:                          1,
		`quorumlock_extend_total{result="ok"}`:                            1,
		`quorumlock_extend_total{result="unconfirmed"}`:                   1,
		`quorumlock_release_nodes_total{result="failed"}`:                 1,
		`quorumlock_release_nodes_total{result="not_owner"}`:              6,
		`quorumlock_release_nodes_total{result="released"}`:               3,
		`quorumlock_lease_lost_total{reason="expired"}`:                   1,
		`quorumlock_lease_lost_total{reason="extend_failed"}`:             0,
		`quorumlock_acquire_duration_seconds_count`:                       3,
		`quorumlock_acquire_attempts_count`:                               3,
		`quorumlock_acquire_attempts_sum`:                                 7,
		`quorumlock_extend_duration_seconds_count`:                        4,
		`quorumlock_lease_held_seconds_count`:                             1,
		`quorumlock_lease_held_seconds_sum`:                               3,
	} {
		v, ok := got[series]
		if !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", series, v, ok, want)
		}
	}
}

// gather returns every sample of reg as "name{labels}" (labels sorted) or,
// for histograms, "name_count" and "name_sum" summed over label sets.
func gather(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if h := m.GetHistogram(); h != nil {
				out[mf.GetName()+"_count"] += float64(h.GetSampleCount())
				out[mf.GetName()+"_sum"] += h.GetSampleSum()
				continue
			}
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
			}
			slices.Sort(labels)
			out[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = m.GetCounter().GetValue()
		}
	}
	return out
}

func TestNewOptionsAndErrors(t *testing.T) {
	if _, err := quorumprom.New(nil); err == nil {
		t.Fatal("nil Registerer accepted")
	}
	reg := prometheus.NewRegistry()
	if _, err := quorumprom.New(reg, quorumprom.WithBuckets([]float64{})); err == nil {
		t.Fatal("empty buckets accepted")
	}
	if _, err := quorumprom.New(reg, quorumprom.WithNamespace("x"), nil); err == nil || !strings.Contains(err.Error(), "option 1 is nil") {
		t.Fatalf("a nil option: %v", err)
	}
	if _, err := quorumprom.New(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := quorumprom.New(reg); err == nil {
		t.Fatal("registering twice on one registry must fail")
	}
	o, err := quorumprom.New(reg, quorumprom.WithNamespace("orders"), quorumprom.WithConstLabels(prometheus.Labels{"locker": "stock"}))
	if err != nil {
		t.Fatalf("another namespace: %v", err)
	}
	o.ObserveAcquire(lease.AcquireEvent{Attempts: 1, Result: lease.ResultCanceled})
	got := gather(t, reg)
	if v, ok := got[`orders_acquire_total{locker="stock",result="canceled"}`]; !ok || v != 1 {
		t.Fatalf("orders_acquire_total: %v", got)
	}
}

// The adapter on a real Locker over five masters.
func TestWithLocker(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Redis: 5})
	// The bed's client options, with socket timeouts long enough that the
	// Locker's node timeout (a context deadline) is what cuts a request
	// short, even on a loaded machine under the race detector.
	var nodes []redis.UniversalClient
	for _, n := range bed.Redis {
		o := testbed.ClientOptions(n.Addr())
		o.DialTimeout = 10 * time.Second
		o.ReadTimeout, o.WriteTimeout = 10*time.Second, 10*time.Second
		c := redis.NewClient(o)
		t.Cleanup(func() { _ = c.Close() })
		nodes = append(nodes, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range nodes {
		if err := quorum.TrustNode(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	obs, err := quorumprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	// Node timeout and TTL leave room for a loaded machine under the race
	// detector: every node must answer within the node timeout for the
	// counts below to hold.
	l, err := quorum.New(nodes, quorum.WithObserver(obs), quorum.WithTTL(time.Minute), quorum.WithNodeTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	le, err := l.Lock(ctx, "prom")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryLock(ctx, "prom"); !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("TryLock: %v", err)
	}
	if err := le.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// Unlock returns at the majority; Close waits for the rest, whose
	// answers the release event counts.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got := gather(t, reg)
	for series, want := range map[string]float64{
		`quorumlock_acquire_total{result="acquired"}`:     1,
		`quorumlock_acquire_total{result="not_acquired"}`: 1,
		`quorumlock_acquire_total{result="unavailable"}`:  0,
	} {
		if got[series] != want {
			t.Errorf("%s = %v, want %v", series, got[series], want)
		}
	}
	// Unlock deleted the key on all five nodes. (The failed TryLock may
	// have won and released a node where Lock's request was still on its
	// way, so there may be one more.)
	if v := got[`quorumlock_release_nodes_total{result="released"}`]; v < 5 {
		t.Errorf("released %v nodes, want at least 5", v)
	}
}

func ExampleNew() {
	obs, err := quorumprom.New(prometheus.NewRegistry())
	if err != nil {
		panic(err)
	}
	var nodes []redis.UniversalClient // one client per independent master
	_, _ = quorum.New(nodes, quorum.WithObserver(obs))
}
