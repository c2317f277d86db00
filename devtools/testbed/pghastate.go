package testbed

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// NodeState is what the monitor says of one data node.
type NodeState struct {
	// Name is the node's name, as PostgresHANode.Name.
	Name string
	// Reported is the state the node's keeper last reported (primary,
	// secondary, wait_primary, catchingup, demoted, ...); Assigned is the
	// state the monitor wants it in.
	Reported, Assigned string
	// Healthy is the monitor's last health check of the node.
	Healthy bool
}

// State asks the monitor for the state of each data node, in the order of
// their ids (pgha1 first).
func (g *PostgresGroup) State(ctx context.Context) ([]NodeState, error) {
	var out []NodeState
	err := g.onMonitor(ctx, func(c *pgx.Conn) error {
		rows, err := c.Query(ctx, `SELECT nodename, reportedstate::text, goalstate::text, health = 1
			FROM pgautofailover.node WHERE formationid = $1 ORDER BY nodeid`, pghaFormation)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (NodeState, error) {
			var s NodeState
			return s, r.Scan(&s.Name, &s.Reported, &s.Assigned, &s.Healthy)
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("testbed: the group's state: %w", err)
	}
	return out, nil
}

// Primary asks the monitor which data node is the primary: the one node
// whose reported and assigned states are a primary's. It returns
// ErrNoPrimary while there is none, as during a failover or a switchover.
func (g *PostgresGroup) Primary(ctx context.Context) (*PostgresHANode, error) {
	states, err := g.State(ctx)
	if err != nil {
		return nil, err
	}
	var found *PostgresHANode
	for _, s := range states {
		if s.Reported != s.Assigned || !isPrimaryState(s.Reported) {
			continue
		}
		if found != nil {
			return nil, fmt.Errorf("%w: two primaries: %v", ErrNoPrimary, states)
		}
		found = g.node(s.Name)
	}
	if found == nil {
		return nil, fmt.Errorf("%w: %v", ErrNoPrimary, states)
	}
	return found, nil
}

// Event is one entry of the monitor's event log.
type Event struct {
	// Time is when the monitor logged it.
	Time time.Time
	// Node is the name of the node the event is about.
	Node string
	// Reported and Assigned are the node's states at the event.
	Reported, Assigned string
	// Description says what happened, in the monitor's words.
	Description string
}

// String formats the event on one line.
func (e Event) String() string {
	return fmt.Sprintf("%s %s %s/%s: %s", e.Time.Format("15:04:05.000"), e.Node, e.Reported, e.Assigned, e.Description)
}

// Events returns the monitor's last events, up to limit, oldest first: what
// it saw and decided, for a test that needs to say why a failover did not
// happen.
func (g *PostgresGroup) Events(ctx context.Context, limit int) ([]Event, error) {
	var out []Event
	err := g.onMonitor(ctx, func(c *pgx.Conn) error {
		rows, err := c.Query(ctx, `SELECT eventtime, nodename, reportedstate::text, goalstate::text, description
			FROM pgautofailover.event WHERE formationid = $1 ORDER BY eventid DESC LIMIT $2`, pghaFormation, limit)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) {
			var e Event
			return e, r.Scan(&e.Time, &e.Node, &e.Reported, &e.Assigned, &e.Description)
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("testbed: the monitor's events: %w", err)
	}
	slices.Reverse(out)
	return out, nil
}

// WaitPrimary waits until the monitor reports a primary (see Primary),
// polling it every 100 ms until ctx ends. After a failover, a client may
// write on the new primary a moment before its keeper has reported it.
func (g *PostgresGroup) WaitPrimary(ctx context.Context) (*PostgresHANode, error) {
	for {
		p, err := g.Primary(ctx)
		if err == nil || !errors.Is(err, ErrNoPrimary) {
			return p, err
		}
		if serr := sleepCtx(ctx, 100*time.Millisecond); serr != nil {
			return nil, fmt.Errorf("%w (%w)", err, serr)
		}
	}
}

// isPrimaryState says whether a node in state s takes writes.
func isPrimaryState(s string) bool {
	switch s {
	case "single", "wait_primary", "primary", "join_primary", "apply_settings":
		return true
	}
	return false
}

func (g *PostgresGroup) node(name string) *PostgresHANode {
	for _, n := range g.Nodes {
		if n.Name() == name {
			return n
		}
	}
	return nil
}

// WaitSteady waits until the monitor reports one data node as primary and
// the other as secondary, each in the state assigned to it, and the
// primary has its standby streaming as a synchronous one: the group
// replicates synchronously again. It polls every 100 ms until ctx ends.
func (g *PostgresGroup) WaitSteady(ctx context.Context) error {
	var last []NodeState
	var lastErr error
	for {
		last, lastErr = g.State(ctx)
		if lastErr == nil && steady(last) {
			if lastErr = g.streaming(ctx, last); lastErr == nil {
				return nil
			}
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return fmt.Errorf("testbed: the Postgres HA group is not steady: %w (last: %v, %v)", err, last, lastErr)
		}
	}
}

// streaming checks on the primary of states that a standby streams from
// it as a synchronous one.
func (g *PostgresGroup) streaming(ctx context.Context, states []NodeState) error {
	var primary *PostgresHANode
	for _, s := range states {
		if s.Reported == "primary" {
			primary = g.node(s.Name)
		}
	}
	if primary == nil {
		return ErrNoPrimary
	}
	var n int
	err := g.onPort(ctx, primary.port, "postgres", func(c *pgx.Conn) error {
		return c.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication
			WHERE state = 'streaming' AND sync_state IN ('sync', 'quorum')`).Scan(&n)
	})
	if err == nil && n == 0 {
		err = fmt.Errorf("no synchronous standby streams from %s", primary.Name())
	}
	return err
}

func steady(states []NodeState) bool {
	var primary, secondary int
	for _, s := range states {
		switch {
		case s.Reported != s.Assigned:
			return false
		case s.Reported == "primary":
			primary++
		case s.Reported == "secondary":
			secondary++
		}
	}
	return primary == 1 && secondary == 1 && len(states) == 2
}

// Switchover has the monitor make the standby the primary, as `pg_autoctl
// perform switchover` does, and returns once the group is steady again,
// with the roles swapped.
func (g *PostgresGroup) Switchover(ctx context.Context) error {
	before, err := g.Primary(ctx)
	if err != nil {
		return fmt.Errorf("testbed: switchover: %w", err)
	}
	wait := 60
	if d, ok := ctx.Deadline(); ok {
		wait = max(1, int(time.Until(d).Seconds()))
	}
	if err := g.runCtl(ctx, g.monitor, "perform", "switchover", "--monitor", g.monitorURI(g.monitor.DirectAddr()),
		"--formation", pghaFormation, "--group", "0", "--wait", strconv.Itoa(wait)); err != nil {
		return fmt.Errorf("testbed: switchover: %w", err)
	}
	if err := g.WaitSteady(ctx); err != nil {
		return fmt.Errorf("testbed: switchover: %w", err)
	}
	after, err := g.Primary(ctx)
	if err != nil {
		return fmt.Errorf("testbed: switchover: %w", err)
	}
	if after == before {
		return fmt.Errorf("testbed: switchover: %s is still the primary", after.Name())
	}
	return nil
}
