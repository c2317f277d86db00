package testbed_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
)

// want checks, once the node answers again, that each key has the value
// given ("" for a key that must not exist).
func want(t *testing.T, ctx context.Context, c *redis.Client, kv map[string]string) {
	t.Helper()
	if err := eventually(ctx, func() error { return c.Ping(ctx).Err() }); err != nil {
		t.Fatalf("the node does not answer: %v", err)
	}
	for k, v := range kv {
		got, err := c.Get(ctx, k).Result()
		if errors.Is(err, redis.Nil) {
			got, err = "", nil
		}
		if err != nil {
			t.Fatalf("get %s: %v", k, err)
		}
		if got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
}

func set(t *testing.T, ctx context.Context, c *redis.Client, kv ...string) {
	t.Helper()
	for i := 0; i+1 < len(kv); i += 2 {
		if err := c.Set(ctx, kv[i], kv[i+1], 0).Err(); err != nil {
			t.Fatalf("set %s: %v", kv[i], err)
		}
	}
}

// bestRoundTrip is the fastest of a few PINGs, so that one slow answer on
// a loaded machine does not count as latency.
func bestRoundTrip(t *testing.T, ctx context.Context, c *redis.Client) time.Duration {
	t.Helper()
	best := time.Duration(-1)
	for i := 0; i < 5; i++ {
		start := time.Now()
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); best < 0 || d < best {
			best = d
		}
	}
	return best
}

// TestLinks checks that a link's faults reach only the link's clients, and
// that a link follows its node across a restart.
func TestLinks(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Redis: 1})
	n := bed.Redis[0]
	ctx := ctxT(t, 3*time.Minute)
	a, err := n.Link("client-a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.Link("client-b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Link("client-a"); err == nil {
		t.Fatal("a second link named client-a was created")
	}
	if a.Name() != "client-a" || b.Name() != "client-b" {
		t.Fatalf("names %q, %q", a.Name(), b.Name())
	}
	if a.Addr() == n.Addr() || b.Addr() == n.Addr() || a.Addr() == b.Addr() {
		t.Fatalf("addresses are not distinct: node %s, a %s, b %s", n.Addr(), a.Addr(), b.Addr())
	}
	ca := connected(t, ctx, a.Addr())
	defer ca.Close()
	cb := connected(t, ctx, b.Addr())
	defer cb.Close()
	cn := connected(t, ctx, n.Addr())
	defer cn.Close()
	// answers says whether addr answers a client with the bed's usual
	// timeouts, trying a few times: one slow answer on a loaded machine is
	// not a fault.
	answers := func(addr string) error {
		c := redis.NewClient(testbed.ClientOptions(addr))
		defer c.Close()
		var err error
		for try := 0; try < 3; try++ {
			if err = c.Ping(ctx).Err(); err == nil {
				return nil
			}
		}
		return err
	}
	set(t, ctx, ca, "via-a", "1")
	want(t, ctx, cn, map[string]string{"via-a": "1"}) // the same server

	t.Run("PartitionOneLink", func(t *testing.T) {
		if err := a.Partition(ctx); err != nil {
			t.Fatal(err)
		}
		errOld := ca.Ping(ctx).Err() // an open connection
		fresh := quick(a.Addr())     // a new one
		errNew := fresh.Ping(ctx).Err()
		_ = fresh.Close()
		errB := answers(b.Addr())
		errN := answers(n.Addr())
		if err := a.Heal(ctx); err != nil {
			t.Fatal(err)
		}
		if !isTimeout(errOld) || !isTimeout(errNew) {
			t.Fatalf("partitioned link: old conn %v, new conn %v; want timeouts", errOld, errNew)
		}
		if errB != nil || errN != nil {
			t.Fatalf("during the partition of link a: link b %v, node address %v; want answers", errB, errN)
		}
		if err := eventually(ctx, func() error { return ca.Ping(ctx).Err() }); err != nil {
			t.Fatalf("link a after heal: %v", err)
		}
	})

	t.Run("NodePartitionSparesLinks", func(t *testing.T) {
		if err := n.Partition(ctx); err != nil {
			t.Fatal(err)
		}
		errN := cn.Ping(ctx).Err()
		errA := answers(a.Addr())
		if err := n.Heal(ctx); err != nil {
			t.Fatal(err)
		}
		if !isTimeout(errN) || errA != nil {
			t.Fatalf("node partitioned: node address %v (want a timeout), link a %v (want an answer)", errN, errA)
		}
		if err := eventually(ctx, func() error { return cn.Ping(ctx).Err() }); err != nil {
			t.Fatalf("node address after heal: %v", err)
		}
	})

	t.Run("LatencyOnOneLink", func(t *testing.T) {
		const d = 150 * time.Millisecond
		if err := b.AddLatency(ctx, d); err != nil {
			t.Fatal(err)
		}
		slow := bestRoundTrip(t, ctx, cb)
		fast := bestRoundTrip(t, ctx, ca)
		if err := b.AddLatency(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if slow < d {
			t.Fatalf("link b: round trip %v with %v of latency", slow, d)
		}
		if fast >= d {
			t.Fatalf("link a: round trip %v (best of 5) while only link b is slow", fast)
		}
		if got := bestRoundTrip(t, ctx, cb); got >= d {
			t.Fatalf("link b: round trip %v (best of 5) after the latency was removed", got)
		}
	})

	t.Run("FollowsRestart", func(t *testing.T) {
		addrA := a.Addr()
		// A partition of the link lasts through the restart.
		if err := a.Partition(ctx); err != nil {
			t.Fatal(err)
		}
		if err := n.Restart(ctx, true); err != nil {
			t.Fatal(err)
		}
		if a.Addr() != addrA {
			t.Fatalf("link address changed across restart: %s -> %s", addrA, a.Addr())
		}
		// Link b reaches the new server (with docker, at a new address).
		want(t, ctx, cb, map[string]string{"via-a": "1"})
		fresh := quick(a.Addr())
		errA := fresh.Ping(ctx).Err()
		_ = fresh.Close()
		if !isTimeout(errA) {
			t.Fatalf("link a partitioned across a restart: %v, want a timeout", errA)
		}
		if err := a.Heal(ctx); err != nil {
			t.Fatal(err)
		}
		want(t, ctx, ca, map[string]string{"via-a": "1"})
	})
}

// TestSnapshot checks that a node restarted from a snapshot has exactly the
// snapshot's data, and then persists by its policy again.
func TestSnapshot(t *testing.T) {
	for _, policy := range []string{testbed.FsyncAlways, testbed.FsyncOff} {
		t.Run(policy, func(t *testing.T) {
			bed := bedtest.Start(t, testbed.Options{Redis: 1, AppendFsync: policy})
			n := bed.Redis[0]
			ctx := ctxT(t, 3*time.Minute)
			c := redis.NewClient(testbed.ClientOptions(n.Addr()))
			defer c.Close()
			set(t, ctx, c, "a", "1")
			snap, err := n.Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if snap.Node() != n.Name() {
				t.Fatalf("snapshot of %s says %s", n.Name(), snap.Node())
			}
			set(t, ctx, c, "a", "2", "b", "3")
			// Taking a snapshot changes nothing a restart with data sees.
			if err := n.Restart(ctx, true); err != nil {
				t.Fatal(err)
			}
			if policy == testbed.FsyncOff {
				want(t, ctx, c, map[string]string{"a": "", "b": ""})
				set(t, ctx, c, "a", "2", "b", "3")
			} else {
				want(t, ctx, c, map[string]string{"a": "2", "b": "3"})
			}

			if err := n.RestartFromSnapshot(ctx, snap); err != nil {
				t.Fatal(err)
			}
			want(t, ctx, c, map[string]string{"a": "1", "b": ""})

			// The node persists by its policy again.
			set(t, ctx, c, "c", "4")
			if err := n.Restart(ctx, true); err != nil {
				t.Fatal(err)
			}
			if policy == testbed.FsyncOff {
				want(t, ctx, c, map[string]string{"a": "", "b": "", "c": ""})
			} else {
				want(t, ctx, c, map[string]string{"a": "1", "b": "", "c": "4"})
			}

			// A snapshot can be restored again.
			if err := n.RestartFromSnapshot(ctx, snap); err != nil {
				t.Fatal(err)
			}
			want(t, ctx, c, map[string]string{"a": "1", "b": "", "c": ""})

			if err := n.RestartFromSnapshot(ctx, testbed.Snapshot{}); err == nil {
				t.Fatal("restart from an empty Snapshot: no error")
			}
			// The faults this bed was not started for say so, and leave
			// the node running.
			if _, err := n.KillLosingTail(ctx, 1); !errors.Is(err, errors.ErrUnsupported) {
				t.Fatalf("KillLosingTail with AppendFsync=%s: %v, want ErrUnsupported", policy, err)
			}
			if err := n.SetClockOffset(ctx, time.Minute); !errors.Is(err, errors.ErrUnsupported) {
				t.Fatalf("SetClockOffset without Options.Clock: %v, want ErrUnsupported", err)
			}
			want(t, ctx, c, map[string]string{"a": "1"})
		})
	}
}

// TestKillLosingTail checks that the last commands of the AOF are lost, and
// that the node starts again without them.
func TestKillLosingTail(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Redis: 1, AppendFsync: testbed.FsyncEverySec})
	n := bed.Redis[0]
	ctx := ctxT(t, 3*time.Minute)
	c := redis.NewClient(testbed.ClientOptions(n.Addr()))
	defer c.Close()
	// keys is k<from>..k<to>, with their values when present, else "".
	keys := func(from, to int, present bool) map[string]string {
		m := make(map[string]string)
		for i := from; i <= to; i++ {
			m[fmt.Sprintf("k%d", i)] = ""
			if present {
				m[fmt.Sprintf("k%d", i)] = fmt.Sprintf("v%d", i)
			}
		}
		return m
	}
	for i := 1; i <= 10; i++ {
		set(t, ctx, c, fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i))
	}
	cut, err := n.KillLosingTail(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if cut != 3 {
		t.Fatalf("cut %d commands, want 3", cut)
	}
	if err := n.Restart(ctx, true); err != nil {
		t.Fatalf("restart after the cut (the server must accept its AOF): %v", err)
	}
	want(t, ctx, c, keys(1, 7, true))
	want(t, ctx, c, keys(8, 10, false))

	t.Run("TransactionIsOneCommand", func(t *testing.T) {
		if _, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, "t1", "x", 0)
			p.Set(ctx, "t2", "x", 0)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		set(t, ctx, c, "u", "x")
		cut, err := n.KillLosingTail(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		if cut != 2 {
			t.Fatalf("cut %d commands, want 2 (a transaction and a SET)", cut)
		}
		if err := n.Restart(ctx, true); err != nil {
			t.Fatal(err)
		}
		want(t, ctx, c, map[string]string{"t1": "", "t2": "", "u": "", "k7": "v7"})
	})

	t.Run("MoreThanThereIs", func(t *testing.T) {
		// The incremental AOF holds k1..k7 (the server appends to it
		// after a restart): asking for more cuts them all.
		cut, err := n.KillLosingTail(ctx, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if cut != 7 {
			t.Fatalf("cut %d commands, want the 7 there were", cut)
		}
		if err := n.Restart(ctx, true); err != nil {
			t.Fatal(err)
		}
		want(t, ctx, c, keys(1, 10, false))
		if got, err := c.DBSize(ctx).Result(); err != nil || got != 0 {
			t.Fatalf("DBSIZE = %d, %v; want an empty node", got, err)
		}
	})
}

// TestClock checks that SetClockOffset moves the node's wall clock, that
// Redis expires keys by it, and that the server runs normally under the
// shim.
func TestClock(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Redis: 2, Clock: true})
	n, other := bed.Redis[0], bed.Redis[1]
	ctx := ctxT(t, 3*time.Minute)
	c := redis.NewClient(testbed.ClientOptions(n.Addr()))
	defer c.Close()
	runID := func() string {
		t.Helper()
		s, err := c.Info(ctx, "server").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(s, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
				return v
			}
		}
		t.Fatalf("no run_id in INFO server:\n%s", s)
		return ""
	}
	// clockIs waits until node's TIME is off by d from ours, within a
	// tolerance for a loaded machine.
	clockIs := func(node *testbed.RedisNode, d time.Duration) {
		t.Helper()
		const tolerance = 10 * time.Second
		var last time.Duration
		err := eventually(ctx, func() error {
			before := time.Now()
			nt, err := node.Time(ctx)
			after := time.Now()
			if err != nil {
				return err
			}
			if nt.Before(before.Add(d-tolerance)) || nt.After(after.Add(d+tolerance)) {
				last = nt.Sub(before)
				return fmt.Errorf("%s is %v off, want %v", node.Name(), last, d)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	id := runID()
	clockIs(n, 0)

	if err := c.Set(ctx, "lease", "mine", 60*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if ttl, err := c.PTTL(ctx, "lease").Result(); err != nil || ttl <= 0 {
		t.Fatalf("PTTL = %v, %v", ttl, err)
	}
	if err := n.SetClockOffset(ctx, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	clockIs(n, 2*time.Minute)
	clockIs(other, 0) // each node has its own clock
	if err := eventually(ctx, func() error {
		if err := c.Get(ctx, "lease").Err(); !errors.Is(err, redis.Nil) {
			return fmt.Errorf("get lease after a jump of 2m past its 60s TTL: %v, want nil", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	if err := n.SetClockOffset(ctx, 0); err != nil {
		t.Fatal(err)
	}
	clockIs(n, 0)
	if err := c.Set(ctx, "lease2", "mine", 60*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if ttl, err := c.PTTL(ctx, "lease2").Result(); err != nil || ttl <= 50*time.Second || ttl > 60*time.Second {
		t.Fatalf("PTTL of a 60s key at offset 0: %v, %v", ttl, err)
	}
	want(t, ctx, c, map[string]string{"lease2": "mine"})

	if err := n.SetClockOffset(ctx, -time.Hour); err != nil {
		t.Fatal(err)
	}
	clockIs(n, -time.Hour)

	// The same process ran through every jump.
	if got := runID(); got != id {
		t.Fatalf("run_id changed from %s to %s: the server restarted under the shim", id, got)
	}

	// A restarted server runs under the shim too, with the offset set.
	if err := n.SetClockOffset(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := n.Restart(ctx, true); err != nil {
		t.Fatal(err)
	}
	clockIs(n, time.Hour)
	want(t, ctx, c, map[string]string{"lease2": ""}) // an hour past its TTL
	if err := n.SetClockOffset(ctx, 0); err != nil {
		t.Fatal(err)
	}
	clockIs(n, 0)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
}
