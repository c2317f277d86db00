package integration_test

// The negative control of the failover checks: the same run with
// asynchronous replication, a standby held back, and a promotion that
// does not ask the monitor. The checkers must see what is lost.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/devtools/audit"
)

// TestPostgresAsyncLosesOrders is TestPostgresFailover's negative
// control. Replication is made asynchronous and the standby held back
// (its replication connections dropped at the primary's proxy) while
// buyers, cart buyers and triple-clickers order and pay through three
// ordersd; the primary, which has committed alone, is killed, and the
// standby promoted by hand (pg_ctl promote, its keeper frozen), as an
// operator or a failover manager that does not check would. The load goes
// on against the promoted node. The checkers must then report what was
// lost: 201s whose orders are gone (their Redis records keep replaying
// them), events in the stream and shipments and charges for orders the
// database no longer holds, and fence counters that went back. Were they
// to find nothing, TestPostgresFailover's clean verdicts would prove
// nothing.
func TestPostgresAsyncLosesOrders(t *testing.T) {
	g, d, ds := startHAOrders(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := g.SetSynchronous(ctx, false); err != nil {
		t.Fatal(err)
	}
	old, err := g.WaitPrimary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	standby := g.Nodes[0]
	if standby == old {
		standby = g.Nodes[1]
	}
	if err := standby.HoldBack(ctx); err != nil {
		t.Fatal(err)
	}
	d.pool.Reset() // the primary's proxy was rebuilt: its connections are closed
	ld := startHALoad(d, ds, haMix{buyers: 8, carts: 4, clickers: 4, newcomers: 2}, 20261203)
	ld.waitCreated(t, 150, time.Minute)
	d.waitShipped(t, 10, time.Minute)
	before := fenceCounters(t, d.pool)
	at := time.Now()
	if err := old.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.PromoteByHand(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := ld.firstCreatedAfter(at, time.Minute); !ok {
		t.Fatal("no order placed on the promoted standby within a minute")
	}
	ld.waitCreated(t, ld.created()+50, time.Minute)
	responses, tally := ld.stop(t, d)
	t.Logf("load: %s", tally)
	d.pool.Reset()
	d.waitDrained(t, time.Minute)
	asyncVerdict(t, d, responses, before, fenceCounters(t, d.pool))
}

// waitShipped waits up to limit until the shipper has acknowledged n
// events: the loss must reach the warehouse for the control to bite.
func (d *drill) waitShipped(t *testing.T, n int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		shipped := 0
		for _, e := range d.haEffects(t) {
			if e.Kind == audit.EffectShipped {
				shipped++
			}
		}
		if shipped >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the shipper acknowledged %d events within %v, want %d", shipped, limit, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// asyncVerdict requires the checkers to catch the loss: lost 201s, and
// events, shipments and charges for orders that are gone; and counts the
// fence counters that went back.
func asyncVerdict(t *testing.T, d *drill, responses []audit.Response, before, after map[string]int64) {
	t.Helper()
	stock := map[string]audit.Stock{}
	for p, n := range d.initial {
		stock[p] = audit.Stock{Initial: n, Final: d.stock(p)}
	}
	rows := d.orders()
	v := audit.Orders(stock, rows, responses)
	effects := d.haEffects(t)
	e := audit.Effects(rows, effects)
	t.Logf("checker: %s", firstLines(v.String(), 4))
	t.Logf("effects (%s): %s", audit.EffectKinds(effects), firstLines(e.String(), 4))
	lost := lostAnswers(v)
	orphans := map[string]int{}
	for _, ef := range effects {
		if !slices.ContainsFunc(rows, func(o audit.OrderRow) bool { return o.OrderID == ef.OrderID }) {
			orphans[ef.Kind]++
		}
	}
	back := 0
	for key, n := range before {
		if after[key] < n {
			back++
		}
	}
	t.Logf("negative control: %d keys' 201s lost, orphaned: %d events, %d shipments, %d charges; %d of %d fence counters went back",
		lost, orphans[audit.EffectEvent], orphans[audit.EffectShipped], orphans[audit.EffectCharge], back, len(before))
	if !v.Caught(audit.CheckAnswerMatchesRow) || lost == 0 {
		t.Errorf("the checker found no lost 201 after an asynchronous standby was promoted: %v", v)
	}
	if !e.Caught(audit.CheckEffectHasOrder) || orphans[audit.EffectEvent] == 0 {
		t.Errorf("the checker found no orphaned event after an asynchronous standby was promoted: %v", e)
	}
}

// lostAnswers counts the keys whose 201 the checker found naming no order
// (a triple-clicker's key may have had three).
func lostAnswers(v audit.Report) int {
	keys := map[string]bool{}
	for _, x := range v.Violations {
		if x.Check == audit.CheckAnswerMatchesRow {
			keys[x.Detail] = true
		}
	}
	return len(keys)
}

// firstLines is s up to its n-th line, each cut at 300 bytes.
func firstLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if len(l) > 300 {
			lines[i] = l[:300] + " ..."
		}
	}
	if len(lines) > n {
		lines = append(lines[:n], fmt.Sprintf("  ... (%d lines more)", len(lines)-n))
	}
	return strings.Join(lines, "\n")
}
