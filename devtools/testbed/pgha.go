package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
)

// PostgresGroup is the bed's Postgres HA group, run by pg_auto_failover
// (Debian's postgresql-15-auto-failover): a monitor and two data nodes, a
// primary and a synchronous standby, each a `pg_autoctl run` service (a
// keeper and its Postgres): a process tree on this machine with the local
// provider, a container of the Postgres image in the host's network with
// the docker one (docker-init, then the service), its files in both cases
// in the bed's directory on this machine (a container has them
// bind-mounted at the same paths). Every fault and every method below
// works the same on both.
//
// Every data node sits behind a loopback proxy, its Addr, and registers
// that address with the monitor as its own (pg_autoctl create postgres
// --hostname 127.0.0.2 --pgport P, with Postgres itself on 127.0.0.1:P),
// so the clients, the other node's replication and the monitor's health
// checks all reach it through the proxy; and each keeper reaches the
// monitor through a link of its own. PostgresHANode.Partition cuts both,
// and has the other node's proxy drop the replication connections the
// node starts.
//
// Replication is synchronous: the primary's synchronous_standby_names is
// ANY 1 of the standby, so a commit returns once the standby has it too.
// (pg_auto_failover's number_sync_standbys stays 0: with one standby it
// already asks for one synchronous copy, and the monitor refuses 1 unless
// two standbys take part in the quorum.) While the standby has failed, the
// monitor lets the primary commit alone (its state is then wait_primary).
//
// The bed's user, PostgresUser with PostgresPassword, is a superuser and
// owns the database PostgresDB on the primary, and so on both nodes.
type PostgresGroup struct {
	// Nodes are the data nodes, pgha1 and pgha2, in that order; pgha1 is
	// the first primary.
	Nodes []*PostgresHANode

	dir      string
	sock     string
	prov     pghaProvider
	runAs    *user.User
	bins     pghaBins
	timeouts PostgresHATimeouts
	monitor  *node
	monPort  int
	uri      string

	// mu guards the partitions (which data nodes are cut off) and which
	// are held back (their replication alone is cut).
	mu   sync.Mutex
	cut  map[*PostgresHANode]bool
	held map[*PostgresHANode]bool
}

// pghaBins are the programs the group runs.
type pghaBins struct{ autoctl, pgctl, initdb string }

// findPGHABins finds pg_autoctl, and pg_ctl and initdb of the PostgreSQL
// that has pg_auto_failover's extension (Debian's layout: the extension of
// postgresql-15-auto-failover is in /usr/lib/postgresql/15/lib). pg_autoctl
// runs the other PostgreSQL programs it needs from pg_ctl's directory, so
// a pg_ctl linked from elsewhere on PATH does not do.
func findPGHABins() (pghaBins, error) {
	autoctl, err := lookPath("pg_autoctl")
	if err != nil {
		return pghaBins{}, fmt.Errorf("%w (it comes with postgresql-15-auto-failover: run `make deps`)", err)
	}
	for _, v := range []string{"17", "16", "15", "14", "13"} {
		root := "/usr/lib/postgresql/" + v
		bin := filepath.Join(root, "bin")
		if _, err := os.Stat(filepath.Join(root, "lib", "pgautofailover.so")); err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(bin, "pg_ctl")); err == nil {
			return pghaBins{autoctl: autoctl, pgctl: filepath.Join(bin, "pg_ctl"), initdb: filepath.Join(bin, "initdb")}, nil
		}
	}
	return pghaBins{}, fmt.Errorf("no PostgreSQL server with pg_auto_failover's extension in /usr/lib/postgresql/*/lib "+
		"(install postgresql-15-auto-failover: run `make deps`): %w", errors.ErrUnsupported)
}

// The group's formation, the address its proxies listen on, and the
// names of its members.
const (
	pghaFormation = "default"
	pghaFrontHost = "127.0.0.2"
	pghaMonitor   = "pgha-monitor"
	pghaMonitorDB = "pg_auto_failover"
	kindAutoctl   = "pg_autoctl"
)

// ErrNoPrimary is returned by PostgresGroup.Primary while no data node is a
// settled primary, as during a failover.
var ErrNoPrimary = errors.New("testbed: the Postgres HA group has no primary")

// startPostgresGroup starts the group on p and waits until it has a primary
// and a synchronous standby. On error nothing is left running.
func startPostgresGroup(ctx context.Context, p provider, opts Options) (*PostgresGroup, error) {
	g, err := newPostgresGroup(ctx, p, opts)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*PostgresGroup, error) {
		_ = g.close(context.WithoutCancel(ctx))
		return nil, err
	}
	if g.monitor, err = newNode(pghaMonitor, 1, false); err != nil {
		return fail(err)
	}
	g.monPort = g.monitor.ports[0]
	for i := range 2 {
		n, err := g.newDataNode(opts, i)
		if n != nil {
			g.Nodes = append(g.Nodes, n)
		}
		if err != nil {
			return fail(fmt.Errorf("pgha%d: %w", i+1, err))
		}
	}
	// The primary's initdb runs while the monitor is created and starts.
	var initErr error
	inited := make(chan struct{})
	go func() {
		defer close(inited)
		initErr = g.Nodes[0].initdb(ctx)
	}()
	if err = g.startMonitor(ctx, opts); err != nil {
		err = fmt.Errorf("%s: %w", pghaMonitor, err)
	}
	<-inited
	if err = errors.Join(err, initErr); err != nil {
		return fail(err)
	}
	wctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	for i, states := range [][]string{{"single"}, {"catchingup", "secondary"}} {
		if err := g.Nodes[i].firstStart(wctx, states...); err != nil {
			return fail(fmt.Errorf("%s: %w", g.Nodes[i].Name(), err))
		}
	}
	if err := g.WaitSteady(wctx); err != nil {
		return fail(err)
	}
	if err := g.setKeeperTimeouts(wctx); err != nil {
		return fail(err)
	}
	if g.uri, err = g.formationURI(wctx); err != nil {
		return fail(err)
	}
	return g, nil
}

// newPostgresGroup creates the group's directories and has p find the
// programs and the user the members run as.
func newPostgresGroup(ctx context.Context, p provider, opts Options) (*PostgresGroup, error) {
	hp, ok := p.(pghaProvider)
	if !ok {
		return nil, fmt.Errorf("the %s provider cannot run it: %w", p.name(), errors.ErrUnsupported)
	}
	g := &PostgresGroup{dir: filepath.Join(p.dir(), "pgha"), prov: hp, cut: map[*PostgresHANode]bool{}, held: map[*PostgresHANode]bool{}}
	g.sock = filepath.Join(g.dir, "sock")
	g.timeouts = FastPostgresHATimeouts()
	if opts.PostgresHATimeouts != nil {
		g.timeouts = *opts.PostgresHATimeouts
	}
	if err := os.MkdirAll(g.sock, 0o700); err != nil {
		return nil, err
	}
	var err error
	if g.bins, g.runAs, err = hp.pghaSetup(ctx, g.dir); err != nil {
		return nil, err
	}
	if g.runAs != nil {
		if err := chownAll(g.dir, g.runAs); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// URI is the group's multi-host connection URI, as `pg_autoctl show uri
// --formation default` prints it, with the bed's credentials: both data
// nodes' addresses and target_session_attrs=read-write, so a client
// connects to whichever node is the primary. It asks for sslmode=disable
// (the servers have no TLS) and connect_timeout=2: each host gets 2 s, so
// a client gets past a partitioned node (with sslmode=prefer, pgx tries
// each host twice).
func (g *PostgresGroup) URI() string { return g.uri }

// formationURI asks the monitor for the formation's URI and adds the bed's
// user and password.
func (g *PostgresGroup) formationURI(ctx context.Context) (string, error) {
	var uri string
	err := g.onMonitor(ctx, func(c *pgx.Conn) error {
		return c.QueryRow(ctx, "SELECT pgautofailover.formation_uri($1)", pghaFormation).Scan(&uri)
	})
	if err != nil {
		return "", fmt.Errorf("testbed: the group's URI: %w", err)
	}
	rest, ok := strings.CutPrefix(uri, "postgres://")
	if !ok {
		return "", fmt.Errorf("testbed: the monitor's URI %q does not start with postgres://", uri)
	}
	rest = strings.Replace(strings.TrimPrefix(rest, "@"), "sslmode=prefer", "sslmode=disable", 1)
	sep := "?"
	if strings.Contains(rest, "?") {
		sep = "&"
	}
	return "postgres://" + PostgresUser + ":" + PostgresPassword + "@" + rest + sep + "connect_timeout=2", nil
}

// close stops every process of the group: the data nodes first, then the
// monitor.
func (g *PostgresGroup) close(ctx context.Context) error {
	var errs []error
	for _, n := range g.Nodes {
		errs = append(errs, n.close(ctx))
	}
	if g.monitor != nil {
		errs = append(errs, g.monitor.close(ctx))
	}
	return errors.Join(errs...)
}
