package nemesis_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/devtools/nemesis"
	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
)

func TestPlanIsReproducibleAndBounded(t *testing.T) {
	opts := nemesis.PlanOptions{Seed: 7, Nodes: 5, Steps: 50, MaxFor: 200 * time.Millisecond}
	a, err := nemesis.Plan(opts)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := nemesis.Plan(opts)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed gave two plans")
	}
	opts.Seed = 8
	if c, _ := nemesis.Plan(opts); reflect.DeepEqual(a, c) {
		t.Fatal("different seeds gave the same plan")
	}
	for _, s := range a {
		if s.Node < 0 || s.Node >= 5 || s.For <= 0 || s.For > 200*time.Millisecond {
			t.Fatalf("step out of bounds: %+v", s)
		}
	}
	for _, bad := range []nemesis.PlanOptions{{Nodes: 0, Steps: 1}, {Nodes: 1, Steps: 0}, {Nodes: 1, Steps: 1 << 20}} {
		if _, err := nemesis.Plan(bad); err == nil {
			t.Errorf("Plan(%+v) accepted", bad)
		}
	}
}

// TestRunHealsEveryFault runs one step of each kind on a real bed and checks
// that every node answers afterwards.
func TestRunHealsEveryFault(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Redis: 3})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var plan []nemesis.Step
	for i, k := range nemesis.AllKinds {
		plan = append(plan, nemesis.Step{Node: i % 3, Kind: k, For: 50 * time.Millisecond, Delay: 20 * time.Millisecond})
	}
	var seen []nemesis.Kind
	if err := nemesis.Run(ctx, bed.Redis, plan, func(s nemesis.Step) { seen = append(seen, s.Kind) }); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(seen, nemesis.AllKinds) {
		t.Fatalf("ran %v, want %v", seen, nemesis.AllKinds)
	}
	for i, c := range bedtest.RedisClients(t, bed) {
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatalf("node %d after the plan: %v", i, err)
		}
	}
	if err := nemesis.Run(ctx, bed.Redis, []nemesis.Step{{Node: 9}}, nil); err == nil {
		t.Fatal("a step naming a missing node was accepted")
	}
}

// fakeNode records the faults a plan injects.
type fakeNode struct {
	name  string
	calls *[]string
}

func (f fakeNode) Name() string { return f.name }
func (f fakeNode) rec(op string) error {
	*f.calls = append(*f.calls, f.name+" "+op)
	return nil
}
func (f fakeNode) Pause(context.Context) error     { return f.rec("pause") }
func (f fakeNode) Resume(context.Context) error    { return f.rec("resume") }
func (f fakeNode) Partition(context.Context) error { return f.rec("partition") }
func (f fakeNode) Heal(context.Context) error      { return f.rec("heal") }
func (f fakeNode) AddLatency(_ context.Context, d time.Duration) error {
	return f.rec("latency " + d.String())
}
func (f fakeNode) Kill(context.Context) error { return f.rec("kill") }
func (f fakeNode) Restart(_ context.Context, keep bool) error {
	if !keep {
		return errors.ErrUnsupported
	}
	return f.rec("restart")
}

// clockNode is a fakeNode with a clock.
type clockNode struct{ fakeNode }

func (c clockNode) SetClockOffset(_ context.Context, d time.Duration) error {
	return c.rec("clock " + d.String())
}

// TestClockJump: a plan draws jumps within its bounds; a jump moves the
// node's clock forward and back; a cluster without clocks refuses it.
func TestClockJump(t *testing.T) {
	opts := nemesis.PlanOptions{Seed: 5, Nodes: 2, Steps: 20, Kinds: []nemesis.Kind{nemesis.ClockJump}, MaxFor: time.Millisecond, MaxJump: 4 * time.Second}
	plan, err := nemesis.Plan(opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range plan {
		if s.Delay < 2*time.Second || s.Delay > 4*time.Second {
			t.Fatalf("jump out of bounds: %v", s)
		}
	}
	var calls []string
	step := nemesis.Step{Node: 1, Kind: nemesis.ClockJump, Delay: 3 * time.Second, For: time.Millisecond}
	c := nemesis.Cluster{Nodes: []nemesis.Target{clockNode{fakeNode{"n0", &calls}}, clockNode{fakeNode{"n1", &calls}}}}
	if err := nemesis.RunOn(context.Background(), c, []nemesis.Step{step}, nil); err != nil {
		t.Fatal(err)
	}
	if want := []string{"n1 clock 3s", "n1 clock 0s"}; !slices.Equal(calls, want) {
		t.Fatalf("calls %v, want %v", calls, want)
	}
	c.Nodes[0] = fakeNode{"n0", &calls}
	if err := nemesis.RunOn(context.Background(), c, []nemesis.Step{step}, nil); !errors.Is(err, errors.ErrUnsupported) || len(calls) != 2 {
		t.Fatalf("a jump on a cluster with a node without a clock: %v, calls %v", err, calls)
	}
}

// TestClockJumpOnRedis: while a jump past a key's TTL lasts, a real Redis
// node has expired the key (an access during the jump finds it gone); the
// node's clock comes back to the real time after the step.
func TestClockJumpOnRedis(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Redis: 1, Clock: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := bedtest.RedisClients(t, bed)[0]
	if err := c.Set(ctx, "k", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	step := nemesis.Step{Node: 0, Kind: nemesis.ClockJump, Delay: 2 * time.Minute, For: 3 * time.Second}
	started, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- nemesis.Run(ctx, bed.Redis, []nemesis.Step{step}, func(nemesis.Step) { close(started) })
	}()
	<-started
	gone := false
	for deadline := time.Now().Add(2 * time.Second); !gone && time.Now().Before(deadline); {
		n, err := c.Exists(ctx, "k").Result()
		if err != nil {
			t.Fatal(err)
		}
		gone = n == 0
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !gone {
		t.Fatal("the key outlived a jump past its TTL")
	}
	now, err := c.Time(ctx).Result()
	if err != nil || time.Until(now).Abs() > 10*time.Second {
		t.Fatalf("the node's clock after the jump: %v (%v), ours %v", now, err, time.Now())
	}
}

// TestRolesAimAtTheLeaderAndAFollower: a plan with Roles alternates
// leader and follower steps, draws the rest as without them, and each step
// hits the member with its role when it runs; with no leader to be found,
// it hits the node drawn.
func TestRolesAimAtTheLeaderAndAFollower(t *testing.T) {
	opts := nemesis.PlanOptions{Seed: 3, Nodes: 3, Steps: 6, Kinds: []nemesis.Kind{nemesis.Pause}, MaxFor: time.Millisecond}
	plain, _ := nemesis.Plan(opts)
	opts.Roles = true
	plan, err := nemesis.Plan(opts)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range plan {
		want := []nemesis.Role{nemesis.Leader, nemesis.Follower}[i%2]
		if s.Role != want || s.Node != plain[i].Node || s.For != plain[i].For {
			t.Fatalf("step %d: %+v, want role %v and otherwise %+v", i, s, want, plain[i])
		}
	}
	var calls []string
	leader := 1
	c := nemesis.Cluster{Leader: func(context.Context) (int, error) { return leader, nil }}
	for _, n := range []string{"n0", "n1", "n2"} {
		c.Nodes = append(c.Nodes, fakeNode{n, &calls})
	}
	var hit []string
	if err := nemesis.RunOn(context.Background(), c, plan, func(s nemesis.Step) { hit = append(hit, s.String()) }); err != nil {
		t.Fatal(err)
	}
	for i, s := range hit {
		leads := strings.HasPrefix(s, "node 1 (leader)")
		if leads != (i%2 == 0) || !strings.Contains(s, "(") {
			t.Fatalf("step %d hit %q: %v", i, s, hit)
		}
	}
	if len(calls) != 2*len(plan) {
		t.Fatalf("calls %v", calls)
	}
	if err := nemesis.RunOn(context.Background(), nemesis.Cluster{Nodes: c.Nodes}, plan, nil); err == nil {
		t.Fatal("a plan with roles ran on a cluster without a leader")
	}
	step := nemesis.Step{Node: 2, Kind: nemesis.Pause, Role: nemesis.Leader}
	c.Leader = func(context.Context) (int, error) { return 0, errors.New("no leader") }
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	calls = nil
	err = nemesis.RunOn(ctx, c, []nemesis.Step{step}, func(s nemesis.Step) { hit = append(hit, s.String()) })
	if err != nil || hit[len(hit)-1] != "node 2: pause for 0s" || !slices.Equal(calls, []string{"n2 pause", "n2 resume"}) {
		t.Fatalf("no leader: %v, %q, %v", err, hit[len(hit)-1], calls)
	}
	c.DataKept = true
	step.Kind = nemesis.KillRestartEmpty
	if err := nemesis.RunOn(context.Background(), c, []nemesis.Step{step}, nil); !errors.Is(err, errors.ErrUnsupported) || len(calls) != 2 {
		t.Fatalf("a restart without data on a cluster that keeps it: %v, calls %v", err, calls)
	}
}

// TestRunOnEtcd runs one step of each kind the bed supports on the etcd
// leader and a follower, and checks that the cluster serves afterwards;
// a restart without data is refused.
func TestRunOnEtcd(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Etcd: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kinds := []nemesis.Kind{nemesis.Pause, nemesis.Partition, nemesis.Latency, nemesis.KillRestartKeep}
	var plan []nemesis.Step
	for i, k := range kinds {
		plan = append(plan, nemesis.Step{Node: i % 3, Kind: k, For: 1500 * time.Millisecond, Delay: 50 * time.Millisecond,
			Role: []nemesis.Role{nemesis.Leader, nemesis.Follower}[i%2]})
	}
	var seen []string
	if err := nemesis.RunOn(ctx, nemesis.Etcd(bed), plan, func(s nemesis.Step) { seen = append(seen, s.String()) }); err != nil {
		t.Fatal(err)
	}
	t.Logf("steps: %q", seen)
	for i, s := range seen {
		if !strings.Contains(s, []string{"(leader)", "(follower)"}[i%2]) {
			t.Errorf("step %d: %q", i, s)
		}
	}
	for _, n := range bed.Etcd {
		if err := n.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := bed.EtcdLeader(ctx); err != nil {
		t.Fatal(err)
	}
	err := nemesis.RunOn(ctx, nemesis.Etcd(bed), []nemesis.Step{{Node: 0, Kind: nemesis.KillRestartEmpty, For: time.Millisecond}}, nil)
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("a restart without data: %v, want ErrUnsupported", err)
	}
}
