package nemesis_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/integration/nemesis"
	"github.com/quorumlock/quorumlock/integration/testbed"
	"github.com/quorumlock/quorumlock/integration/testbed/bedtest"
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
