package integration_test

import (
	"context"
	"testing"
	"time"
)

// TestDrillsOnHA runs every drill of TestDrills (runDrills) on the bed's
// Postgres HA group instead of a single Postgres: each drill's database is
// created on the group's primary (synchronous replication carries it to
// the standby), and ordersd's ORDERS_DATABASE_URL, like the drill's own
// pool, is the group's multi-host URI with that database
// (storetest.NewOnGroup), so it reaches whichever node is the primary. No
// drill faults Postgres: they check that the order path keeps its
// guarantees when its database is the group's (target_session_attrs,
// synchronous commits). The group must be steady at the end.
func TestDrillsOnHA(t *testing.T) {
	start := time.Now()
	k, g := startHAKit(t)
	k.onHA = true
	t.Logf("drills on the HA group: bed (%s) and ordersd -tags failpoints ready in %v", k.bed.Provider, time.Since(start).Round(time.Millisecond))
	// A cleanup: the parallel drills run after this function returns, and
	// this runs after them, before the bed closes.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := g.WaitSteady(ctx); err != nil {
			t.Errorf("the group is not steady after the drills: %v; monitor: %v", err, haEvents(ctx, g))
		}
		t.Logf("drills on the HA group: done in %v", time.Since(start).Round(time.Millisecond))
	})
	runDrills(t, &k.drillKit)
}
