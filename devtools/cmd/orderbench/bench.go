package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"net/http"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/internal/benchkit"
	"github.com/quorumlock/quorumlock/orders/auth"
	"github.com/quorumlock/quorumlock/orders/store"
	"github.com/quorumlock/quorumlock/quorum"
)

// bench is the command's bed, database and the one HTTP client every
// simulated user shares.
type bench struct {
	cfg      config
	bed      *testbed.Bed
	provider string
	// runID names the database and prefixes every user id, so runs never
	// share one.
	runID string
	// dbs are the fresh, migrated databases of the runs, by where they
	// run (pgSingle, pgHA); db is the one of the run under way.
	dbs map[string]*database
	db  *database
	// ha follows the HA group's primary and its monitor's events (nil
	// without the group).
	ha *haWatch
	// meter measures the CPU split of the closed-loop runs (-cpu-split;
	// else nil).
	meter *cpuMeter
	// etcdAddrs are the etcd members' own client addresses (none when no
	// run locks on etcd).
	etcdAddrs []string
	// secret signs the users' bearer tokens; verifier checks them.
	secret   []byte
	verifier *auth.Verifier
	// transport and client carry every user's requests.
	transport *http.Transport
	client    *http.Client
	progress  *benchkit.Progress
}

// setUp starts the bed (see startBed), creates and migrates a fresh
// database on each Postgres of the runs, and opens the shared HTTP client.
// On error it closes what it opened.
func setUp(ctx context.Context, cfg config) (_ *bench, err error) {
	var id [4]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("run id: %w", err)
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, fmt.Errorf("token secret: %w", err)
	}
	verifier, err := auth.NewVerifier(secret)
	if err != nil {
		return nil, fmt.Errorf("token verifier: %w", err)
	}
	b := &bench{cfg: cfg, runID: hex.EncodeToString(id[:]), secret: secret, verifier: verifier}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	if err := b.startBed(ctx); err != nil {
		return nil, err
	}
	b.dbs = map[string]*database{}
	for _, where := range cfg.postgres {
		mainDSN, err := b.mainDSN(where)
		if err != nil {
			return nil, err
		}
		d, err := openDatabase(ctx, mainDSN, "orderbench_"+b.runID)
		if d != nil {
			b.dbs[where] = d
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
	}
	b.db = b.dbs[cfg.postgres[0]]
	b.transport = newTransport(cfg)
	b.client = &http.Client{Transport: b.transport}
	return b, nil
}

// startBed starts the bed: the Redis masters, which it vouches for,
// Postgres, and the etcd cluster when a run locks on etcd.
func (b *bench) startBed(ctx context.Context) error {
	opts := testbed.Options{Redis: redisNodes, Postgres: b.cfg.usesSingle(), PostgresHA: b.cfg.usesHA(), AppendFsync: b.cfg.fsync}
	if b.cfg.usesEtcd() {
		opts.Etcd = etcdMembers
	}
	var bed *testbed.Bed
	var err error
	// The bed's in-process proxies run under the label of their role, for
	// -cpu-split.
	pprof.Do(ctx, roleLabels(roleBed), func(ctx context.Context) { bed, err = testbed.New(ctx, opts) })
	if err != nil {
		return fmt.Errorf("start the test bed: %w", err)
	}
	b.bed = bed
	b.provider = "test bed, " + bed.Provider + " provider, appendfsync " + b.cfg.fsync
	nodes := map[string]string{}
	if bed.PostgresHA != nil {
		if b.ha, err = watchHA(ctx, bed.PostgresHA); err != nil {
			return err
		}
		for _, n := range bed.PostgresHA.Nodes {
			nodes[n.Name()] = n.Dir()
		}
	}
	if b.cfg.cpuSplit {
		b.meter = &cpuMeter{groups: newProcGroups(nodes), nodes: slices.Sorted(maps.Keys(nodes))}
	}
	for _, n := range bed.Etcd {
		b.etcdAddrs = append(b.etcdAddrs, n.DirectAddr())
	}
	for _, n := range bed.Redis {
		// Brand-new nodes never held a lock: let them vote at once.
		a := n.Admin()
		err := quorum.TrustNode(ctx, a)
		_ = a.Close()
		if err != nil {
			return fmt.Errorf("trust %s: %w", n.Name(), err)
		}
	}
	return nil
}

// newTransport returns the transport every user shares: it keeps an idle
// connection per client of the largest count, and per buyer of a sale.
func newTransport(cfg config) *http.Transport {
	perHost := cfg.maxCount()
	if cfg.hasSale() {
		// A sale's buyers each hold a connection while they wait: keeping
		// them idle afterwards spares the retries a new connection each.
		perHost = max(perHost, cfg.flash.buyers/instancesPerRun+1)
	}
	if slices.Contains(cfg.scenarios, scenarioBusy) {
		perHost = max(perHost, cfg.clients[0]+cfg.busyBuyers)
	}
	return &http.Transport{
		MaxIdleConns:        instancesPerRun * perHost,
		MaxIdleConnsPerHost: perHost,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
}

// database is one fresh, migrated database of the runs: its DSN, which
// the instances open, and a small pool of the command's own, for seeding
// and checks.
type database struct {
	dsn   string
	admin *pgxpool.Pool
	st    *store.Store
}

// openDatabase creates the database name on the server (or HA group) of
// mainDSN, migrates it and opens its admin pool. It returns what it opened
// even on error, for the caller to close.
func openDatabase(ctx context.Context, mainDSN, name string) (*database, error) {
	dsn, err := createDatabase(ctx, mainDSN, name)
	if err != nil {
		return nil, err
	}
	if _, err := store.MigrateDSN(ctx, dsn); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	pcfg.MaxConns = 4
	d := &database{dsn: dsn}
	if d.admin, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return nil, fmt.Errorf("open the admin pool: %w", err)
	}
	if d.st, err = store.New(d.admin); err != nil {
		return d, fmt.Errorf("store: %w", err)
	}
	return d, nil
}

// createDatabase creates the database name on the server of mainDSN (a
// URL, multi-host or not) and returns its DSN.
func createDatabase(ctx context.Context, mainDSN, name string) (string, error) {
	dsn, err := withDatabase(mainDSN, name)
	if err != nil {
		return "", err
	}
	conn, err := pgx.Connect(ctx, mainDSN)
	if err != nil {
		return "", fmt.Errorf("connect to postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return dsn, nil
}

// close releases everything setUp opened; the bed takes the database with
// it.
func (b *bench) close() {
	if b.transport != nil {
		b.transport.CloseIdleConnections()
	}
	for _, d := range b.dbs {
		if d.admin != nil {
			d.admin.Close()
		}
	}
	if b.bed != nil {
		_ = b.bed.Close()
	}
}

// runPlan is one run to make: a scenario, with its count of closed-loop
// clients (none for flash), in one mode, with one lock backend in lock
// mode.
type runPlan struct {
	scenario string
	clients  int
	mode     string
	backend  string // "" in db mode
	postgres string // pgSingle or pgHA
}

// label names the plan's mode as the report does: lock/redlock,
// lock/etcd or db.
func (p runPlan) label() string { return modeLabel(p.mode, p.backend) }

// modeLabel names a mode with its backend: lock/redlock, lock/etcd or db.
func modeLabel(mode, backend string) string {
	if backend == "" {
		return mode
	}
	return mode + "/" + backend
}

// tag is the plan's mode in product and user ids: lock-redlock,
// lock-etcd or db, and "-ha" after it on the HA group. The runs of both
// databases share the Redis masters, so their users must differ: the
// idempotency keys of one would replay the other's answers.
func (p runPlan) tag() string {
	t := strings.ReplaceAll(p.label(), "/", "-")
	if p.postgres == pgHA {
		t += "-ha"
	}
	return t
}

// name is how the report names the plan's scenario: distinct, hot and cart
// with their client count ("hot/64").
func (p runPlan) name() string {
	if isClosedLoop(p.scenario) {
		return fmt.Sprintf("%s/%d", p.scenario, p.clients)
	}
	return p.scenario
}

// title names the run in the progress bar and in errors: its name, its
// mode and, on the HA group, "on ha".
func (p runPlan) title() string {
	t := p.name() + "/" + p.label()
	if p.postgres == pgHA {
		t += " on ha"
	}
	return t
}

// isClosedLoop reports whether scenario sc is run once per client count.
func isClosedLoop(sc string) bool {
	return sc == scenarioDistinct || sc == scenarioHot || sc == scenarioCart
}

// plans lists the runs in the order of the flags: scenario by scenario,
// client count by count, mode by mode, and in lock mode backend by
// backend.
func (c config) plans() []runPlan {
	var out []runPlan
	for _, sc := range c.scenarios {
		counts := c.clients
		switch sc {
		case scenarioFlash:
			counts = []int{0}
		case scenarioMixed, scenarioBusy:
			counts = c.clients[:1]
		}
		for _, n := range counts {
			for _, mode := range c.modes {
				backends := c.backends
				if mode == modeDB {
					backends = []string{""}
				}
				for _, be := range backends {
					for _, where := range c.postgres {
						out = append(out, runPlan{scenario: sc, clients: n, mode: mode, backend: be, postgres: where})
					}
				}
			}
		}
	}
	return out
}

// runAll makes every run of the plan.
func (b *bench) runAll(ctx context.Context) ([]*runResult, error) {
	plans := b.cfg.plans()
	b.progress = benchkit.NewProgress("orderbench", len(plans), b.cfg.quiet)
	defer b.progress.Finish()
	var res []*runResult
	for _, p := range plans {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		b.progress.Start(p.title())
		r, err := b.runPlanned(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.title(), err)
		}
		res = append(res, r)
		b.progress.Done()
	}
	return res, nil
}

// runPlanned makes the run of p on its database, and notes the HA group's
// primary before and after it.
func (b *bench) runPlanned(ctx context.Context, p runPlan) (*runResult, error) {
	b.db = b.dbs[p.postgres]
	before, err := b.haPrimary(ctx)
	if err != nil {
		return nil, err
	}
	r, err := b.runOne(ctx, p)
	if err != nil {
		return nil, err
	}
	if r.cpu != nil {
		r.cpu.primary = before
	}
	if p.postgres == pgHA {
		r.primaryBefore = before
		if r.primaryAfter, err = b.haPrimary(ctx); err != nil {
			return nil, err
		}
	}
	return r, nil
}
