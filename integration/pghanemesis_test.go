package integration_test

// Faults on the members that are not the primary: the standby and the
// monitor, through the nemesis.

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/devtools/nemesis"
	"github.com/quorumlock/quorumlock/devtools/testbed"
)

// haNodeFault is one nemesis step of TestPostgresHAMembers: a fault on
// the standby or on the monitor.
type haNodeFault struct {
	monitor bool
	kind    nemesis.Kind
}

func (f haNodeFault) String() string {
	if f.monitor {
		return "monitor " + f.kind.String()
	}
	return "standby " + f.kind.String()
}

// TestPostgresHAMembers: under the failover runs' load (single products,
// carts, triple-clickers, payments, a shipper), the nemesis kills, pauses
// and partitions the standby and the monitor, one after the other
// (haMemberFaults: the standby killed and the monitor partitioned in make
// test, every kind on both with -tags chaos), each for 8 s. None of them
// may fail the primary over; the orders go on (the longest stretch
// without one is reported: with the standby gone, commits wait until the
// monitor lets the primary commit alone); the group is steady again after
// each; and the checkers find every 201 an order, every event, shipment
// and charge an order, stock balanced and fence counters only up.
func TestPostgresHAMembers(t *testing.T) {
	g, d, ds := startHAOrders(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	ld := startHALoad(d, ds, haMix{buyers: 8, carts: 4, clickers: 4, newcomers: 2}, 20261206)
	ld.waitCreated(t, 50, 30*time.Second)
	before := fenceCounters(t, d.pool)
	c := nemesis.PostgresHA(g)
	for _, f := range haMemberFaults {
		haMemberFault(ctx, t, g, c, ld, f)
		ld.waitCreated(t, ld.created()+50, 30*time.Second)
	}
	responses, tally := ld.stop(t, d)
	t.Logf("load: %s", tally)
	if tally.timeouts > 0 || tally.noRetryAfter > 0 {
		t.Errorf("clients hung (%d timeouts) or got a 503 without Retry-After (%d): %s", tally.timeouts, tally.noRetryAfter, strings.Join(ld.hung, "; "))
		haWarnings(t, ds)
	}
	d.pool.Reset()
	fencesOnlyRose(t, before, fenceCounters(t, d.pool))
	d.waitDrained(t, time.Minute)
	d.haVerdict(responses)
}

// haMemberFault runs f through the nemesis for 8 s, and checks that the
// primary stayed the primary and that the group is steady again.
func haMemberFault(ctx context.Context, t *testing.T, g *testbed.PostgresGroup, c nemesis.Cluster, ld *haLoad, f haNodeFault) {
	t.Helper()
	primary, err := g.WaitPrimary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := len(c.Nodes) - 1 // the monitor
	if !f.monitor {
		node = 1 - slices.Index(g.Nodes, primary)
	}
	at, unavailable := time.Now(), ld.unavailable()
	step := nemesis.Step{Node: node, Kind: f.kind, For: 8 * time.Second}
	if err := nemesis.RunOn(ctx, c, []nemesis.Step{step}, nil); err != nil {
		t.Fatalf("%v: %v", f, err)
	}
	if err := g.WaitSteady(ctx); err != nil {
		t.Fatalf("%v: the group is not steady again: %v; monitor: %v", f, err, haEvents(ctx, g))
	}
	if p, err := g.Primary(ctx); err != nil || p != primary {
		t.Fatalf("%v: the primary is %v (%v), want %s: a fault off the primary failed it over; monitor: %v", f, p, err, primary.Name(), haEvents(ctx, g))
	}
	t.Logf("%v (%s): no failover; the longest stretch without an order placed, from the fault to the group steady again, %v; %d 503s",
		f, c.Nodes[node].Name(), ld.longestGap(at, time.Now()).Round(time.Millisecond), ld.unavailable()-unavailable)
}
