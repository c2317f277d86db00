package testbed

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// The group's ways to lose a commit, for the negative control of the
// failover checks: asynchronous replication, a standby held back, and a
// promotion that does not ask the monitor. pg_auto_failover itself never
// promotes a standby that has not caught up; an operator or a failover
// manager that promotes one anyway loses what the old primary committed
// alone.

// SetSynchronous makes replication synchronous (on, the group's own
// setting) or asynchronous, with `pg_autoctl set node replication-quorum`
// on every standby: asynchronous, the primary's synchronous_standby_names
// is empty and a commit returns once it is on the primary alone. It
// returns once the primary runs with the new setting.
func (g *PostgresGroup) SetSynchronous(ctx context.Context, on bool) error {
	prim, err := g.Primary(ctx)
	if err != nil {
		return err
	}
	for _, n := range g.Nodes {
		if n == prim {
			continue
		}
		if err := g.runCtl(ctx, n.node, "set", "node", "replication-quorum", strconv.FormatBool(on), "--pgdata", n.srv.dataDir()); err != nil {
			return fmt.Errorf("%s: replication-quorum %v: %w", n.Name(), on, err)
		}
	}
	for {
		var names string
		err := g.onPort(ctx, prim.port, "postgres", func(c *pgx.Conn) error {
			return c.QueryRow(ctx, "SHOW synchronous_standby_names").Scan(&names)
		})
		if err == nil && (names != "") == on {
			return nil
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return fmt.Errorf("%s: synchronous_standby_names is %q (%v): %w", prim.Name(), names, err, ctx.Err())
		}
	}
}

// HoldBack stops the node's replication and nothing else: the other
// nodes' proxies drop the replication connections it starts (they are
// rebuilt for it, which closes their clients' connections once), while
// its clients, its keeper's reports and the monitor's health checks pass.
// A standby held back falls behind while the primary commits; with
// synchronous replication the primary's commits wait, until the monitor
// lets it commit alone. Release ends it.
func (n *PostgresHANode) HoldBack(context.Context) error { return n.setHeld(true) }

// Release lets the node's replication through again.
func (n *PostgresHANode) Release(context.Context) error { return n.setHeld(false) }

func (n *PostgresHANode) setHeld(held bool) error {
	g := n.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if held {
		g.held[n] = true
	} else {
		delete(g.held, n)
	}
	return g.applyFrontsLocked()
}

// PromoteByHand promotes the node's Postgres with `pg_ctl promote`, as an
// operator or a failover manager that does not ask the monitor would,
// having first frozen the node's keeper (SIGSTOP to its pg_autoctl
// processes, not to Postgres) so that it does not undo the promotion. The
// node stays out of the monitor's hands until it is restarted or killed.
func (n *PostgresHANode) PromoteByHand(ctx context.Context) error {
	run, ok := n.run.(pghaRunner)
	if !ok {
		return fmt.Errorf("%s: not a member of the group", n.Name())
	}
	if err := run.freezeKeeper(ctx); err != nil {
		return fmt.Errorf("%s: freeze the keeper: %w", n.Name(), err)
	}
	if err := n.g.exec(ctx, n.node, n.g.bins.pgctl, "promote", "-D", n.srv.dataDir(), "-w", "-t", "30"); err != nil {
		return fmt.Errorf("%s: promote: %w", n.Name(), err)
	}
	return nil
}
