package testbed

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// PostgresHAMonitor is the group's pg_auto_failover monitor and its fault
// handle. Kill, Pause, Resume and Restart act on its service (its
// pg_autoctl and its Postgres). Partition cuts it off from the keepers:
// each keeper's link to it resets every connection (as a data node's
// partition does), and its own proxy drops every byte; its health checks
// of the data nodes still go out. AddLatency delays what it sends through
// its proxy and the keepers' links.
//
// While the monitor is down nothing fails over: the primary goes on
// taking writes as long as its standby is there, and the group waits.
type PostgresHAMonitor struct {
	g *PostgresGroup
}

// Monitor returns the group's monitor.
func (g *PostgresGroup) Monitor() *PostgresHAMonitor { return &PostgresHAMonitor{g: g} }

// Name is the monitor's name in the bed.
func (m *PostgresHAMonitor) Name() string { return m.g.monitor.Name() }

// Kill sends SIGKILL to the monitor's service and every process under it.
func (m *PostgresHAMonitor) Kill(ctx context.Context) error { return m.g.monitor.Kill(ctx) }

// Pause freezes the monitor's service and every process under it.
func (m *PostgresHAMonitor) Pause(ctx context.Context) error { return m.g.monitor.Pause(ctx) }

// Resume continues what Pause froze.
func (m *PostgresHAMonitor) Resume(ctx context.Context) error { return m.g.monitor.Resume(ctx) }

// Restart starts the monitor's service again with its data, killing it
// first if it runs, and returns once it answers.
func (m *PostgresHAMonitor) Restart(ctx context.Context) error {
	return m.g.monitor.restart(ctx, dataKeep)
}

// Partition cuts the monitor off from the keepers until Heal.
func (m *PostgresHAMonitor) Partition(ctx context.Context) error { return m.cut(ctx, true) }

// Heal ends a partition; the keepers reconnect.
func (m *PostgresHAMonitor) Heal(ctx context.Context) error { return m.cut(ctx, false) }

func (m *PostgresHAMonitor) cut(ctx context.Context, on bool) error {
	g := m.g
	g.mu.Lock()
	defer g.mu.Unlock()
	var errs []error
	for _, n := range g.Nodes {
		if g.cut[n] {
			continue // its own partition keeps its link refused
		}
		errs = append(errs, rebuildFront(n.monLink.proxy, frontState{rejected: on}))
	}
	if on {
		errs = append(errs, g.monitor.Partition(ctx))
	} else {
		errs = append(errs, g.monitor.Heal(ctx))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s: %w", m.Name(), err)
	}
	return nil
}

// AddLatency delays by d what the monitor sends to its clients and to
// the keepers; 0 removes the delay.
func (m *PostgresHAMonitor) AddLatency(ctx context.Context, d time.Duration) error {
	errs := []error{m.g.monitor.AddLatency(ctx, d)}
	for _, n := range m.g.Nodes {
		errs = append(errs, n.monLink.proxy.latency(ctx, d))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s: latency: %w", m.Name(), err)
	}
	return nil
}
