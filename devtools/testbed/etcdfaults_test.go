package testbed_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/internal/wait"
)

// timesOut checks that a read through c fails, and not at once: the
// member does not answer.
func timesOut(t *testing.T, ctx context.Context, c *clientv3.Client, what string) {
	t.Helper()
	start := time.Now()
	_, err := etcdGet(ctx, c, "any", time.Second, true)
	if took := time.Since(start); err == nil || took < 900*time.Millisecond {
		t.Fatalf("%s: read returned %v after %v, want a timeout after 1s", what, err, took)
	}
}

// newLeaderBesides waits until a majority agrees on a leader other than
// old, and returns it.
func newLeaderBesides(t *testing.T, ctx context.Context, bed *testbed.Bed, old *testbed.EtcdNode) *testbed.EtcdNode {
	t.Helper()
	var leader *testbed.EtcdNode
	err := eventually(ctx, func() error {
		l, err := bed.EtcdLeader(ctx)
		if err != nil {
			return err
		}
		if l == old {
			return fmt.Errorf("%s still leads", old.Name())
		}
		leader = l
		return nil
	})
	if err != nil {
		t.Fatalf("no new leader: %v", err)
	}
	return leader
}

// testEtcdPause freezes the leader: requests to it time out, the others
// elect a leader and serve, and once resumed it answers with what they
// wrote.
func testEtcdPause(t *testing.T, bed *testbed.Bed) {
	ctx := ctxT(t, 2*time.Minute)
	leader := settled(t, ctx, bed)
	_, addrs := others(bed, leader)
	rest, paused := etcdClient(t, addrs...), etcdClient(t, leader.Addr())
	etcdPut(t, ctx, rest, "pause/before", "1")
	wantEtcd(t, ctx, paused, "pause/before", "1", false)
	if err := leader.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := leader.Resume(ctx); err != nil {
			t.Error(err)
		}
	}()
	timesOut(t, ctx, paused, "paused "+leader.Name())
	etcdPut(t, ctx, rest, "pause/during", "2")
	wantEtcd(t, ctx, rest, "pause/during", "2", false)
	newLeaderBesides(t, ctx, bed, leader)
	if err := leader.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	wantEtcd(t, ctx, paused, "pause/during", "2", false)
}

// testEtcdKillRestart kills the leader, writes through the others, and
// restarts it: it comes back as the same member, with its own data and
// what it missed.
func testEtcdKillRestart(t *testing.T, bed *testbed.Bed) {
	ctx := ctxT(t, 2*time.Minute)
	victim := settled(t, ctx, bed)
	_, addrs := others(bed, victim)
	rest := etcdClient(t, addrs...)
	id := victim.ID()
	etcdPut(t, ctx, rest, "kill/before", "1")
	wantEtcd(t, ctx, adminOf(t, victim), "kill/before", "1", true)
	if err := victim.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	timesOut(t, ctx, etcdClient(t, victim.Addr()), "killed "+victim.Name())
	etcdPut(t, ctx, rest, "kill/during", "2")
	newLeaderBesides(t, ctx, bed, victim)
	if err := victim.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := victim.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := victim.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.MemberID != id || victim.ID() != id {
		t.Fatalf("%s came back as member %x, was %x", victim.Name(), st.MemberID, id)
	}
	admin := adminOf(t, victim)
	wantEtcd(t, ctx, admin, "kill/before", "1", true)
	wantEtcd(t, ctx, admin, "kill/during", "2", true)
	members, err := admin.MemberList(ctx)
	if err != nil || len(members.Members) != 3 {
		t.Fatalf("member list after the restart: %v, %v", members, err)
	}
	wantEtcd(t, ctx, etcdClient(t, victim.Addr()), "kill/during", "2", false)
}

// testEtcdPartition cuts the leader off: the others elect a leader and
// take writes; the cut member, asked directly, still answers serializable
// reads from its own data, but cannot serve a linearizable read, gives up
// its leadership and receives none of the others' writes, since its
// traffic is cut both ways. Healed, it catches up.
func testEtcdPartition(t *testing.T, bed *testbed.Bed) {
	ctx := ctxT(t, 2*time.Minute)
	cut := settled(t, ctx, bed)
	_, addrs := others(bed, cut)
	rest, admin := etcdClient(t, addrs...), adminOf(t, cut)
	etcdPut(t, ctx, rest, "part/before", "1")
	wantEtcd(t, ctx, admin, "part/before", "1", true)
	viaProxy := etcdClient(t, cut.Addr())
	wantEtcd(t, ctx, viaProxy, "part/before", "1", false)
	if err := cut.Partition(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := cut.Heal(ctx); err != nil {
			t.Error(err)
		}
	}()
	leader := newLeaderBesides(t, ctx, bed, cut)
	for i := range 3 {
		etcdPut(t, ctx, rest, fmt.Sprintf("part/during/%d", i), "2")
	}
	timesOut(t, ctx, viaProxy, "partitioned "+cut.Name()+" through its proxy")
	// Without a leader's heartbeats it gives up its leader within a few
	// election timeouts (1s each).
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := eventually(lctx, func() error {
		st, err := cut.Status(lctx)
		if err != nil {
			return err
		}
		if st.Leader == cut.ID() || st.Leader == leader.ID() {
			return fmt.Errorf("%s follows %x", cut.Name(), st.Leader)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the cut member still has a leader: %v", err)
	}
	if _, err := etcdGet(ctx, admin, "part/before", 3*time.Second, false); err == nil {
		t.Fatal("the cut member served a linearizable read")
	}
	if got, err := etcdGet(ctx, admin, "part/during/2", 3*time.Second, true); err != nil || got != "" {
		t.Fatalf("the cut member's own data has part/during/2 = %q (%v): the majority's writes reached it", got, err)
	}
	wantEtcd(t, ctx, admin, "part/before", "1", true)
	if err := cut.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	wantEtcd(t, ctx, admin, "part/during/2", "2", false)
	wantEtcd(t, ctx, viaProxy, "part/during/2", "2", false)
}

// bestOf is the fastest of n calls of f, so that one slow call on a loaded
// machine does not count as latency.
func bestOf(t *testing.T, n int, f func() error) time.Duration {
	t.Helper()
	best := time.Duration(-1)
	for range n {
		start := time.Now()
		if err := f(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); best < 0 || d < best {
			best = d
		}
	}
	return best
}

// putThroughElections puts key, trying again, within d in all, when etcd
// answers that the request timed out because the leader changed or its
// connection to it was lost: a leader whose raft messages are delayed on a
// loaded machine can miss heartbeats and lose an election, which is not the
// latency under test.
func putThroughElections(ctx context.Context, c *clientv3.Client, key, val string, d time.Duration) error {
	pctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		_, err := c.Put(pctx, key, val)
		switch {
		case err == nil:
			return nil
		case pctx.Err() != nil:
			return err
		case errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost), errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail),
			errors.Is(err, rpctypes.ErrLeaderChanged), errors.Is(err, rpctypes.ErrNoLeader), errors.Is(err, rpctypes.ErrTimeout):
			_ = wait.Sleep(pctx, 100*time.Millisecond) // an election takes at least that
			continue
		}
		return err
	}
}

// testEtcdLatency delays one member: reads through its address are slower
// by the delay, and writes the leader commits wait for its delayed raft
// messages.
func testEtcdLatency(t *testing.T, bed *testbed.Bed) {
	const delay = 400 * time.Millisecond
	ctx := ctxT(t, 2*time.Minute)
	leader := settled(t, ctx, bed)
	followers, _ := others(bed, leader)
	c, viaFollower := etcdClient(t, leader.Addr()), etcdClient(t, followers[0].Addr())
	wantEtcd(t, ctx, c, "hello", "world", false)
	read := func() error { _, err := etcdGet(ctx, c, "hello", 10*time.Second, true); return err }
	write := func() error { return putThroughElections(ctx, viaFollower, "latency", "x", 10*time.Second) }
	readBase, writeBase := bestOf(t, 5, read), bestOf(t, 5, write)
	if err := leader.AddLatency(ctx, delay); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := leader.AddLatency(ctx, 0); err != nil {
			t.Error(err)
		}
	}()
	readSlow, writeSlow := bestOf(t, 3, read), bestOf(t, 3, write)
	t.Logf("read %v -> %v, write through a follower %v -> %v, with %v on the leader %s",
		readBase, readSlow, writeBase, writeSlow, delay, leader.Name())
	if readSlow < delay-50*time.Millisecond || readSlow > readBase+delay+5*time.Second {
		t.Errorf("a read took %v with a delay of %v (%v without)", readSlow, delay, readBase)
	}
	if writeSlow < delay-50*time.Millisecond {
		t.Errorf("a write the leader commits took %v with a delay of %v on its raft messages (%v without)", writeSlow, delay, writeBase)
	}
	if err := leader.AddLatency(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if back := bestOf(t, 5, read); back > readBase+delay/2 {
		t.Errorf("a read still takes %v once the delay is gone (%v before)", back, readBase)
	}
}
