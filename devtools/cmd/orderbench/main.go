// Command orderbench measures POST /orders end to end: HTTP, bearer-token
// check, idempotency claim in Redis, stock lock (or not), the order
// transaction in Postgres, and the answer.
//
// It starts its own test bed (five Redis masters and Postgres, and a
// three-member etcd cluster when lock mode runs on the etcd backend;
// QUORUMLOCK_TESTBED chooses the provider), migrates a fresh database on
// it, and for every run runs three service instances in this process, each
// with its own pgx pool, go-redis clients, stock lock (quorum.Locker, or
// etcdlock.Locker on an etcd client of its own; fenced by a fencing
// reserver either way) and idempotency store, behind its own loopback HTTP
// server: what three ordersd processes sharing one Postgres, one set of
// Redis masters (and one etcd cluster) would be. Traffic goes only to that
// bed and to loopback.
//
// Scenarios (-scenarios):
//
//	distinct  every client orders its own product: no two requests want the same stock row
//	hot       every client orders product "42": all requests want one stock row
//	cart      every client orders carts: each request one unit each of 3 distinct
//	          products picked at random (from -seed) out of 10, named in random order
//	flash     a flash sale: -flash-buyers buyers want the -flash-units units of one product
//	mixed     a flash sale on one product while distinct clients go on ordering their own
//	busy      a popular product whose stock lasts the run, bought by -busy-buyers closed-loop
//	          clients, while distinct clients go on ordering their own
//
// Modes (-modes):
//
//	lock  the instances take the stock lock (orders.WithLocker): the
//	      requests for one product queue on each instance and are placed in
//	      batches under one lease, and a sold-out product is answered
//	      without the lock. It runs once per backend of -backends, reported
//	      as lock/redlock and lock/etcd:
//	        redlock  quorum.Locker over the five Redis masters (ordersd's
//	                 ORDERS_LOCK_BACKEND=redlock)
//	        etcd     etcdlock.Locker on the etcd cluster (ORDERS_LOCK_BACKEND=etcd,
//	                 as cmd/ordersd's openEtcdLock builds it: the fences come
//	                 from the same Postgres reserver)
//	db    no lock: Postgres alone arbitrates (row lock, fence taken in the transaction)
//
// -backends defaults to both: with the default flags that makes 24 runs
// instead of the 16 of redlock alone, about half as long again (one more
// closed-loop run per scenario and count, one more sale of flash and of
// mixed); -backends redlock is the shorter run.
//
// Both modes keep the Redis idempotency fast path (orders.WithIdempotency),
// and both shed overload with 503 and Retry-After.
//
// distinct, hot and cart are closed loops, run once per count of -clients
// (a comma-separated list) and mode, and reported as e.g. hot/64: that
// many goroutines, each a user with its own bearer token, send POST
// /orders round-robin over the three instances, every request with a fresh
// Idempotency-Key and quantity 1 (of every line, for cart), for -warmup
// (not measured) and then -duration. The carts of a cart run draw from 10
// products of the run's own, each seeded with more stock than any run can
// sell; in lock mode a cart takes one lease on the stock keys of its 3
// products (all or nothing), in db mode Postgres alone arbitrates. Each
// client's carts follow -seed and its index, so both modes send the same
// carts.
//
// flash seeds one product with exactly -flash-units units. Each of the
// -flash-buyers buyers is a user with one Idempotency-Key who sends its
// first POST at a time drawn uniformly within -flash-spread of the sale's
// start (from -seed, so both modes see the same schedule), round-robin
// over the instances. A 201 or a 409 out of stock is a buyer's final
// answer; on a 503 (or a 202 in progress, or no answer) it waits the
// Retry-After, at most 1s, and sends the same request with the same key
// again, for at most 30 tries and 60s. The report gives when the product
// sold out, when the last buyer was answered, the buyers' answer latency
// (first send to final answer), the answers by kind, the retries, the peak
// of database connections in use and the units oversold, which must be 0.
//
// mixed runs a flash sale (the same flags) while the first -clients count
// of closed-loop clients order distinct products, from the sale's start
// until every buyer has its final answer or gave up, and for at least
// -duration; then the same clients alone, for as long. It reports their
// orders/s and p99 without and during the sale, and the peak of database
// connections in use in each phase (pg_stat_activity, every 20ms).
//
// busy runs three phases of closed-loop load, each after a -warmup and
// for -duration: the first -clients count of distinct clients and the
// -busy-buyers buyers of the popular product (each a user of its own, a
// fresh Idempotency-Key per request, one unit each) together, then the
// distinct clients alone, then the buyers alone. It reports each side's
// orders/s and p99 together and alone, and what else they were answered
// (503s, and requests that got no answer within -request-timeout).
//
// Postgres (-postgres): the instances' database is the bed's single
// Postgres (single), its Postgres HA group (ha: a pg_auto_failover monitor,
// a primary and a synchronous standby) or
// both (both: every run is made once on each, one after the other, and the
// report sets them side by side). On the HA group every commit also waits
// for the standby. The instances reach the group through its multi-host
// URI, the bed's proxies in the way, as ordersd on the bed does
// (-ha-clients proxy), or at both nodes' own addresses (-ha-clients
// direct; the standby's replication still crosses the primary's proxy).
// The report says which node was the primary before and after each run on
// the group, and every event the monitor logged while the runs went on.
//
// -cpu-split measures, over the window of every closed-loop run, the CPU
// time of each process of the bed (from /proc: the Redis masters, the
// single Postgres, the HA group's primary, standby and monitor, each with
// every process below it) and of this process, and splits this process's
// by role with a CPU profile of the window: the instances (what ordersd
// would spend), the load's clients, the bed's in-process proxies, and the
// rest (the Go runtime's own work: GC workers and the like).
//
// After each run every loop has stopped, and the database must hold
// exactly one order per 201 answer (none for any other answer but
// requests whose outcome the client could not learn), with the lines the
// request named, and have lost exactly that much stock; for cart, every
// product's stock left plus the units of its order_lines must also equal
// the stock seeded. A flash sale must sell no more than its units and
// leave no negative stock. The command fails when a check does not hold,
// after the report. It prints markdown tables, and per scenario how
// the modes compare; -json writes every figure, -plot draws latency CDFs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/internal/benchkit"
	"github.com/quorumlock/quorumlock/orders"
)

// Scenario names.
const (
	scenarioDistinct = "distinct"
	scenarioHot      = "hot"
	scenarioCart     = "cart"
	scenarioFlash    = "flash"
	scenarioMixed    = "mixed"
	scenarioBusy     = "busy"
)

// Mode names.
const (
	modeLock = "lock"
	modeDB   = "db"
)

// Where the instances' database runs (-postgres): the bed's single
// Postgres or its HA group; both takes each in turn.
const (
	pgSingle = "single"
	pgHA     = "ha"
	pgBoth   = "both"
)

// How the instances reach the HA group (-ha-clients).
const (
	haViaProxy = "proxy"
	haDirect   = "direct"
)

// Lock backends of lock mode: ordersd's ORDERS_LOCK_BACKEND values.
const (
	backendRedlock = "redlock"
	backendEtcd    = "etcd"
)

var (
	allScenarios = []string{scenarioDistinct, scenarioHot, scenarioCart, scenarioFlash, scenarioMixed, scenarioBusy}
	allModes     = []string{modeLock, modeDB}
	allBackends  = []string{backendRedlock, backendEtcd}
)

// Bounds of the flags.
const (
	maxClients      = 1024
	minDuration     = 100 * time.Millisecond
	maxDuration     = 10 * time.Minute
	maxWarmup       = time.Minute
	minLockWait     = 10 * time.Millisecond
	maxLockWait     = 5 * time.Second
	minReqTimeout   = time.Second
	maxReqTimeout   = 5 * time.Minute
	maxPoolConns    = 256
	maxFlashUnits   = 1_000_000
	maxFlashBuyers  = 10_000 // each holds a connection: two descriptors in this process
	maxFlashSpread  = 10 * time.Minute
	instancesPerRun = 3
	redisNodes      = 5
	etcdMembers     = 3
)

// config is the parsed command line.
type config struct {
	// clients are the closed-loop client counts, in the order given;
	// mixed uses the first.
	clients        []int
	duration       time.Duration
	warmup         time.Duration
	scenarios      []string
	modes          []string
	backends       []string // of lock mode
	lockWait       time.Duration
	lockRule       string // of lock mode: contended or always
	busyBuyers     int
	requestTimeout time.Duration
	poolConns      int
	fsync          string
	// postgres are the databases every run is made on, in order: pgSingle,
	// pgHA or both.
	postgres  []string
	haClients string
	// cpuSplit measures the CPU split of every closed-loop run's window.
	cpuSplit   bool
	flash      flashConfig
	jsonPath   string
	plotPath   string
	cpuProfile string
	quiet      bool
}

// flashConfig is the sale of the flash and mixed scenarios.
type flashConfig struct {
	units  int
	buyers int
	spread time.Duration
	seed   uint64
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout)
	switch {
	case errors.Is(err, flag.ErrHelp):
		// The flag set printed the usage.
	case err != nil:
		fmt.Fprintln(os.Stderr, "orderbench:", err)
		os.Exit(1)
	}
}

// parse reads and validates the flags.
func parse(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("orderbench", flag.ContinueOnError)
	scen := fs.String("scenarios", strings.Join(allScenarios, ","), "comma-separated scenarios: "+strings.Join(allScenarios, ", "))
	modes := fs.String("modes", strings.Join(allModes, ","), "comma-separated modes: "+strings.Join(allModes, ", "))
	backends := fs.String("backends", strings.Join(allBackends, ","), "comma-separated stock lock backends; lock mode runs once per backend: "+strings.Join(allBackends, ", "))
	clients := fs.String("clients", "64,512", fmt.Sprintf("comma-separated closed-loop client counts, each 1..%d; distinct, hot and cart run once per count, mixed takes the first", maxClients))
	fs.DurationVar(&c.duration, "duration", 5*time.Second, "measured length of each closed-loop run; mixed: the least length of each phase")
	fs.DurationVar(&c.warmup, "warmup", time.Second, "unmeasured load before each closed-loop measurement (mixed: before each phase)")
	fs.DurationVar(&c.lockWait, "lock-wait", 500*time.Millisecond, "longest wait for the stock lock in lock mode (ordersd's ORDERS_LOCK_WAIT); the queue waits twice that, as ordersd's ORDERS_QUEUE_WAIT")
	fs.DurationVar(&c.requestTimeout, "request-timeout", 30*time.Second, "client-side bound of one request")
	fs.StringVar(&c.lockRule, "lock-rule", "contended", "which batches take the lock in lock mode (ordersd's ORDERS_LOCK): contended (auto) or always (on)")
	fs.IntVar(&c.busyBuyers, "busy-buyers", 300, fmt.Sprintf("busy: closed-loop buyers of the popular product (1..%d)", maxClients))
	fs.IntVar(&c.poolConns, "pg-conns", 0, "pgx pool size of each instance (0: the pgx default, as ordersd)")
	pg := fs.String("postgres", pgSingle, "the instances' database: single (the bed's Postgres), ha (its Postgres HA group, a primary and a synchronous standby) or both (every run on each, side by side)")
	fs.StringVar(&c.haClients, "ha-clients", haViaProxy, "how the instances reach the HA group: proxy (its multi-host URI, through the bed's proxies, as ordersd on the bed) or direct (the nodes' own addresses)")
	fs.BoolVar(&c.cpuSplit, "cpu-split", false, "measure each closed-loop run's CPU time per process of the bed and per role in this process over its window (not with -cpuprofile)")
	fs.StringVar(&c.fsync, "fsync", testbed.FsyncEverySec, "appendfsync of the bed's Redis masters: always, everysec or off")
	fs.IntVar(&c.flash.units, "flash-units", 500, fmt.Sprintf("flash, mixed: units of the product on sale (1..%d)", maxFlashUnits))
	fs.IntVar(&c.flash.buyers, "flash-buyers", 5000, fmt.Sprintf("flash, mixed: buyers, each its own user with one Idempotency-Key (1..%d)", maxFlashBuyers))
	fs.DurationVar(&c.flash.spread, "flash-spread", time.Second, "flash, mixed: the buyers' first requests are spread uniformly over this long")
	fs.Uint64Var(&c.flash.seed, "seed", 1, "flash, mixed: seed of the buyers' schedule; cart: of the carts")
	fs.StringVar(&c.jsonPath, "json", "", "write every figure as JSON to this file")
	fs.StringVar(&c.plotPath, "plot", "", "draw latency CDFs, one panel per scenario, into this PNG file")
	fs.BoolVar(&c.quiet, "quiet", false, "no progress bar on stderr")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the runs (bed start-up excluded; the in-process instances included) to this file, for go tool pprof")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if c.scenarios, err = parseList("-scenarios", *scen, allScenarios); err != nil {
		return c, err
	}
	if c.modes, err = parseList("-modes", *modes, allModes); err != nil {
		return c, err
	}
	if c.backends, err = parseList("-backends", *backends, allBackends); err != nil {
		return c, err
	}
	if c.clients, err = parseCounts("-clients", *clients, maxClients); err != nil {
		return c, err
	}
	if c.postgres, err = parsePostgres(*pg); err != nil {
		return c, err
	}
	return c, c.validate()
}

// validate checks the bounds of the parsed flags.
func (c config) validate() error {
	switch {
	case c.duration < minDuration || c.duration > maxDuration:
		return fmt.Errorf("-duration %v: want %v..%v", c.duration, minDuration, maxDuration)
	case c.warmup < 0 || c.warmup > maxWarmup:
		return fmt.Errorf("-warmup %v: want 0..%v", c.warmup, maxWarmup)
	case c.lockWait < minLockWait || c.lockWait > maxLockWait:
		return fmt.Errorf("-lock-wait %v: want %v..%v", c.lockWait, minLockWait, maxLockWait)
	case c.requestTimeout < minReqTimeout || c.requestTimeout > maxReqTimeout:
		return fmt.Errorf("-request-timeout %v: want %v..%v", c.requestTimeout, minReqTimeout, maxReqTimeout)
	case c.requestTimeout <= c.lockWait:
		return fmt.Errorf("-request-timeout %v: want more than -lock-wait %v, or waiting requests time out on the client", c.requestTimeout, c.lockWait)
	case c.poolConns < 0 || c.poolConns > maxPoolConns:
		return fmt.Errorf("-pg-conns %d: want 0 (the pgx default) or 1..%d", c.poolConns, maxPoolConns)
	case c.flash.units < 1 || c.flash.units > maxFlashUnits:
		return fmt.Errorf("-flash-units %d: want 1..%d", c.flash.units, maxFlashUnits)
	case c.flash.buyers < 1 || c.flash.buyers > maxFlashBuyers:
		return fmt.Errorf("-flash-buyers %d: want 1..%d", c.flash.buyers, maxFlashBuyers)
	case c.flash.spread < 0 || c.flash.spread > maxFlashSpread:
		return fmt.Errorf("-flash-spread %v: want 0..%v", c.flash.spread, maxFlashSpread)
	case c.plotPath != "" && !strings.HasSuffix(strings.ToLower(c.plotPath), ".png"):
		return fmt.Errorf("-plot %q: want a .png file", c.plotPath)
	}
	switch c.fsync {
	case testbed.FsyncAlways, testbed.FsyncEverySec, testbed.FsyncOff:
	default:
		return fmt.Errorf("-fsync %q: want always, everysec or off", c.fsync)
	}
	switch {
	case c.haClients != haViaProxy && c.haClients != haDirect:
		return fmt.Errorf("-ha-clients %q: want proxy or direct", c.haClients)
	case c.cpuSplit && c.cpuProfile != "":
		return errors.New("-cpu-split and -cpuprofile: one CPU profile at a time, choose one")
	}
	if c.busyBuyers < 1 || c.busyBuyers > maxClients {
		return fmt.Errorf("-busy-buyers %d: want 1..%d", c.busyBuyers, maxClients)
	}
	if _, err := orders.ParseLockRule(c.lockRule); err != nil || c.lockRule == "" {
		return fmt.Errorf("-lock-rule %q: want contended or always", c.lockRule)
	}
	return nil
}

// parsePostgres reads -postgres: the databases to run on, in order.
func parsePostgres(value string) ([]string, error) {
	switch value {
	case pgSingle, pgHA:
		return []string{value}, nil
	case pgBoth:
		return []string{pgSingle, pgHA}, nil
	}
	return nil, fmt.Errorf("-postgres %q: want single, ha or both", value)
}

// usesHA reports whether a run of the plan is made on the HA group.
func (c config) usesHA() bool { return slices.Contains(c.postgres, pgHA) }

// usesSingle reports whether a run of the plan is made on the single
// Postgres.
func (c config) usesSingle() bool { return slices.Contains(c.postgres, pgSingle) }

// parseCounts splits a comma-separated flag value into distinct counts of
// 1..limit, in the order given.
func parseCounts(flagName, value string, limit int) ([]int, error) {
	var out []int
	for _, f := range strings.Split(value, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.Atoi(f)
		switch {
		case err != nil:
			return nil, fmt.Errorf("%s %q: %q is not a count", flagName, value, f)
		case n < 1 || n > limit:
			return nil, fmt.Errorf("%s %d: want 1..%d", flagName, n, limit)
		case slices.Contains(out, n):
			return nil, fmt.Errorf("%s: %d given twice", flagName, n)
		}
		out = append(out, n)
	}
	return out, nil
}

// maxCount returns the largest of the client counts.
func (c config) maxCount() int { return slices.Max(c.clients) }

// usesEtcd reports whether a run of the plan takes the stock lock on etcd.
func (c config) usesEtcd() bool {
	return slices.Contains(c.modes, modeLock) && slices.Contains(c.backends, backendEtcd)
}

// hasSale reports whether a scenario of the run holds a flash sale.
func (c config) hasSale() bool {
	return slices.Contains(c.scenarios, scenarioFlash) || slices.Contains(c.scenarios, scenarioMixed)
}

// parseList splits a comma-separated flag value into known, distinct
// names, in the order given.
func parseList(flagName, value string, known []string) ([]string, error) {
	var out []string
	for _, name := range strings.Split(value, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name == "":
			return nil, fmt.Errorf("%s %q: empty name: want some of %s", flagName, value, strings.Join(known, ", "))
		case !slices.Contains(known, name):
			return nil, fmt.Errorf("%s: unknown name %q: want some of %s", flagName, name, strings.Join(known, ", "))
		case slices.Contains(out, name):
			return nil, fmt.Errorf("%s: %q given twice", flagName, name)
		}
		out = append(out, name)
	}
	return out, nil
}

// run parses args, runs every (scenario, mode) pair and writes the report
// to out. It fails when a run's correctness check fails, after the report.
func run(ctx context.Context, args []string, out io.Writer) error {
	cfg, err := parse(args)
	if err != nil {
		return err
	}
	b, err := setUp(ctx, cfg)
	if err != nil {
		return err
	}
	defer b.close()
	stopProfile, err := benchkit.CPUProfile(cfg.cpuProfile)
	if err != nil {
		return err
	}
	res, err := b.runAll(ctx)
	if perr := stopProfile(); err == nil {
		err = perr
	}
	if err != nil {
		return err
	}
	s := summarize(cfg, b.provider, b.runID, res)
	if b.ha != nil {
		if s.HA, err = b.ha.summary(ctx, cfg, b.dbs[pgHA].dsn); err != nil {
			return err
		}
	}
	report(out, s)
	if cfg.jsonPath != "" {
		if err := writeJSON(cfg.jsonPath, s); err != nil {
			return err
		}
	}
	if cfg.plotPath != "" {
		if err := writePlot(cfg.plotPath, res); err != nil {
			return err
		}
	}
	return checkFailures(s)
}
