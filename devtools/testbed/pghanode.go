package testbed

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// PostgresHANode is one data node of the Postgres HA group and its fault
// handle: a pg_autoctl service, its keeper and its Postgres. Its Addr, on
// 127.0.0.2, is the address it registered with the monitor; DirectAddr,
// on 127.0.0.1, is its Postgres's own. Both stay the same for the life of
// the bed.
//
// Kill sends SIGKILL to the service and every process under it (keeper,
// Postgres and its backends), Pause and Resume SIGSTOP and SIGCONT to all
// of them (on docker: docker kill, and docker pause and unpause, which
// freeze every process of the node's container), and Restart starts
// `pg_autoctl run` again with the node's data: the keeper rejoins the
// group in whatever role the monitor assigns.
// AddLatency delays what the node sends through its proxy.
type PostgresHANode struct {
	*node
	g *PostgresGroup
	// port is the node's port, on 127.0.0.1 for Postgres and on
	// 127.0.0.2 for its proxy.
	port int
	// id is the node's id in the monitor; its replication connections
	// are named after it.
	id int
	// monLink is the keeper's way to the monitor.
	monLink *Link
	// created is set once the node has been created: later starts run
	// its service.
	created atomic.Bool
	// front is the fault state of the node's proxy; under g.mu.
	front frontState
}

// newDataNode starts the proxy of data node i and gives the node its
// server and runner. On error the node it returns, when not nil, must be
// closed.
func (g *PostgresGroup) newDataNode(opts Options, i int) (*PostgresHANode, error) {
	name := fmt.Sprintf("pgha%d", i+1)
	px, port, err := newFrontProxy(name)
	if err != nil {
		return nil, err
	}
	nd := &node{srv: server{name: name}, ports: []int{port}, direct: []string{loopback(port)}, front: []*nodeProxy{px}}
	n := &PostgresHANode{node: nd, g: g, port: port}
	if n.monLink, err = g.monitor.link(name); err != nil {
		return n, err
	}
	srv, err := g.memberServer(name, port, opts, func(ctx context.Context, _ []string) error {
		return g.onPort(ctx, port, "postgres", func(c *pgx.Conn) error { return c.Ping(ctx) })
	})
	srv.args = func([]int, dataMode) []string { return n.args() }
	if err == nil {
		err = g.setRunner(nd, srv, port)
	}
	return n, err
}

// newFrontProxy starts a data node's proxy on 127.0.0.2 and a port that is
// also free on 127.0.0.1, where the node's Postgres will listen: the node
// registers the proxy's address, and pg_autoctl gives Postgres the port it
// registers.
func newFrontProxy(name string) (*nodeProxy, int, error) {
	var last error
	for range 20 {
		l, err := net.Listen("tcp", pghaFrontHost+":0")
		if err != nil {
			return nil, 0, fmt.Errorf("%s: listen on %s (a loopback address): %w", name, pghaFrontHost, err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if l, last = net.Listen("tcp", loopback(port)); last != nil {
			continue
		}
		_ = l.Close()
		srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
		px := &nodeProxy{name: name, srv: srv}
		if px.proxy, last = px.start(net.JoinHostPort(pghaFrontHost, strconv.Itoa(port)), loopback(port)); last == nil {
			return px, port, nil
		}
	}
	return nil, 0, fmt.Errorf("%s: no port free on both 127.0.0.1 and %s: %w", name, pghaFrontHost, last)
}

// initdb initialises the first primary's data directory. A standby gets
// its own from a base backup of the primary.
func (n *PostgresHANode) initdb(ctx context.Context) error {
	conf := append(n.g.commonConf("pgha"), n.g.timeouts.dataConf()...)
	if err := n.g.initdb(ctx, n.node, conf, dataHBA); err != nil {
		return fmt.Errorf("%s: %w", n.Name(), err)
	}
	return nil
}

// args is pg_autoctl's command line: on the first start `create postgres
// --run`, which registers the node with the monitor, as the primary (the
// first node, whose Postgres is initialised) or as a standby (from a base
// backup of the primary), and then runs its service; later `run`.
func (n *PostgresHANode) args() []string {
	g, data := n.g, n.srv.dataDir()
	if n.created.Load() {
		return []string{"run", "--pgdata", data}
	}
	return []string{"create", "postgres", "--pgctl", g.bins.pgctl, "--pgdata", data,
		"--pghost", g.sock, "--pgport", strconv.Itoa(n.port), "--listen", "127.0.0.1",
		"--name", n.Name(), "--hostname", pghaFrontHost, "--dbname", PostgresDB,
		"--monitor", g.monitorURI(n.monLink.Addr()), "--skip-pg-hba", "--no-ssl", "--run"}
}

// firstStart creates the node and starts its service, and waits until the
// monitor reports it in one of states (its keeper has finished its
// creation). The first primary then gets the bed's user, owner of the
// bed's database.
func (n *PostgresHANode) firstStart(ctx context.Context, states ...string) error {
	g := n.g
	err := n.start(ctx, dataKeep)
	if err == nil {
		n.created.Store(true)
		err = g.waitReported(ctx, n, states...)
	}
	if err == nil {
		err = g.onMonitor(ctx, func(c *pgx.Conn) error {
			return c.QueryRow(ctx, "SELECT nodeid FROM pgautofailover.node WHERE nodename = $1", n.Name()).Scan(&n.id)
		})
	}
	if err != nil || n != g.Nodes[0] {
		return err
	}
	// The checkpoint: the standby's base backup starts with a spread one,
	// which would pace the writes of the creation's dirty pages over
	// minutes.
	return g.onPort(ctx, n.port, "postgres", func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, fmt.Sprintf("CREATE ROLE %s LOGIN SUPERUSER PASSWORD '%s'; ALTER DATABASE %s OWNER TO %s; CHECKPOINT",
			PostgresUser, PostgresPassword, PostgresDB, PostgresUser))
		return err
	})
}

// waitReported waits until the monitor reports node n in one of states,
// polling it every 50 ms until ctx ends.
func (g *PostgresGroup) waitReported(ctx context.Context, n *PostgresHANode, states ...string) error {
	var last []NodeState
	var lastErr error
	for {
		if last, lastErr = g.State(ctx); lastErr == nil {
			for _, s := range last {
				if s.Name == n.Name() && slices.Contains(states, s.Reported) {
					return nil
				}
			}
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return fmt.Errorf("not reported %v by the monitor: %w (last: %v, %v)", states, err, last, lastErr)
		}
	}
}

// DSN is the URL of the bed's database on this node alone, through its
// proxy, as the bed's user: on a standby it only reads.
func (n *PostgresHANode) DSN() string { return postgresDSN(n.Addr(), PostgresDB) }

// Link creates a new loopback listener in front of the node's Postgres,
// for one client: see RedisNode.Link. The node's Partition does not cut
// it, so a test can watch a partitioned node through it.
func (n *PostgresHANode) Link(name string) (*Link, error) { return n.link(name) }

// Restart starts the node's service again with its data, killing it first
// if it runs, behind the same address. It returns once the node's Postgres
// answers; the monitor then assigns it its role (a former primary comes
// back as a standby).
func (n *PostgresHANode) Restart(ctx context.Context) error { return n.restart(ctx, dataKeep) }

// Partition cuts the node off from everything: its clients and the
// monitor's health checks (its proxy drops every byte and hangs its
// connections), its keeper's reports (its link to the monitor resets every
// connection), and the other node's replication in both directions (the
// other node's proxy drops the replication connections this one starts;
// that proxy is rebuilt for it, which closes its clients' connections
// once). Heal ends it.
func (n *PostgresHANode) Partition(ctx context.Context) error {
	g := n.g
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cut[n] = true
	if !n.front.partitioned {
		if err := n.front0().partition(); err != nil {
			return fmt.Errorf("%s: partition: %w", n.Name(), err)
		}
		n.front.partitioned = true
	}
	// The keeper's way to the monitor is cut by refusing it: every
	// connection is reset at once. (Were its connections left to hang, the
	// keeper would wait forever on the one it keeps open, for it sets no
	// timeout on its queries, while a real partition ends that connection
	// once TCP gives up on its unacknowledged bytes, which the proxy
	// acknowledges; and each of its two connection attempts per round would
	// take libpq's minimum connect_timeout, 2 s, which stretches its
	// partition detection past what a 15 s failover leaves it.)
	if err := rebuildFront(n.monLink.proxy, frontState{rejected: true}); err != nil {
		return fmt.Errorf("%s: partition: %w", n.Name(), err)
	}
	return g.applyFrontsLocked()
}

// Heal ends a partition. Connections that lived through it are closed
// (the other node's proxy is rebuilt again, which closes its clients'
// connections once more); clients, keepers and standbys reconnect.
func (n *PostgresHANode) Heal(ctx context.Context) error {
	g := n.g
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.cut, n)
	if err := rebuildFront(n.monLink.proxy, frontState{}); err != nil {
		return fmt.Errorf("%s: heal: %w", n.Name(), err)
	}
	return g.applyFrontsLocked()
}

func (n *PostgresHANode) front0() *nodeProxy { return n.node.front[0] }

// applyFrontsLocked rebuilds each data node's proxy whose fault state
// differs from the one the partitions and the held-back nodes ask for.
func (g *PostgresGroup) applyFrontsLocked() error {
	for _, n := range g.Nodes {
		want := frontState{partitioned: g.cut[n]}
		for _, m := range g.Nodes {
			if m != n && (g.cut[m] || g.held[m]) {
				want.apps = append(want.apps, "pgautofailover_standby_"+strconv.Itoa(m.id))
			}
		}
		if want.partitioned == n.front.partitioned && slices.Equal(want.apps, n.front.apps) {
			continue
		}
		if err := rebuildFront(n.front0(), want); err != nil {
			return fmt.Errorf("%s: %w", n.Name(), err)
		}
		n.front = want
	}
	return nil
}

// close stops the node's proxy and kills its service.
func (n *PostgresHANode) close(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return n.node.close(ctx)
}

// Dir is the directory of the node's files on this machine: its data
// (data/), its pg_autoctl configuration and state (xdg/) and the log of
// its service and Postgres (pg_autoctl.log).
func (n *PostgresHANode) Dir() string { return filepath.Join(n.g.dir, n.Name()) }
