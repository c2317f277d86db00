// Command lockbench runs every lock contender side by side, in one run, on
// the same Redis nodes, through a set of scenarios, and prints one markdown
// table per scenario (and optionally JSON and latency CDF plots).
//
// Contenders, built once per run on the same go-redis clients (one client
// per node), and etcd's on an etcd client of its own:
//
//	quorumlock          quorum.Locker over every node (Redlock, majority of N)
//	quorumlock-noguard  the same with the amnesia guard off, to show its cost
//	redsync             redsync over the same nodes (the reference Redlock client)
//	redsync-failfast    the same with WithFailFast(true): it answers at a majority
//	etcd                etcdlock.Locker on a 3-member etcd cluster (the consensus lock:
//	                    etcd's lock recipe on one session per Locker), one etcd client
//	                    per set of go-redis clients
//	single-node         SET NX PX + compare-and-delete on the first node only
//	floor               one parallel PING to every node: the network floor of a round
//
// The primitive scenarios (semaphore, rw, election) have contenders of
// their own: quorumlock's and etcd's primitives (lease.Primitives, on the
// Lockers above), and in the semaphore scenarios also counter-semaphore
// (devtools/countersem over the same masters: the per-node counter scheme,
// UNSAFE, a negative control; -only names it) and single-node (a
// sorted-set semaphore on the first node only, semaphore.lua).
//
// Scenarios (-scenarios):
//
//	solo-N       no contention: N workers doing lock+unlock pairs on distinct keys
//	hot-N-Hms    N workers contend for one key: acquire (waiting), hold H ms, unlock,
//	             for -hot-duration; reports the acquire wait and fairness
//	slow-node    the last node answers -slow-latency late (through the bed's proxy)
//	node-down    the last node is frozen (SIGSTOP) for the scenario
//	mixed-W-D-Hms
//	             three instances of each contender (each its own clients and
//	             Locker or Redsync, like three service processes) on the same
//	             nodes, each with W waiters on one hot key (hold H ms) and D
//	             workers on distinct keys; each round runs, for -hot-duration
//	             each, the hot key alone, the distinct keys alone, then both,
//	             and reports each kind's rate alone and in the mix
//	multi-K      -multi-workers workers take leases of K keys at once, each lease
//	             K distinct keys picked at random (from -seed) out of a pool of
//	             -multi-pool, so the key sets overlap: acquire all (waiting),
//	             unlock all, for -hot-duration; quorumlock takes one LockMulti
//	             lease (all or nothing per node, one script call per node), etcd
//	             one LockMulti lease (etcdlock takes one recipe lock per key in
//	             sorted order, on its one session), the other contenders one
//	             lock per key in sorted key order (the deadlock-free way to hold
//	             several), released in reverse
//	semaphore-P  W workers (semaphore-P-W; default 32) share P permits of one
//	             semaphore: acquire (waiting), hold 1ms, release, for
//	             -hot-duration; reports the wait, fairness and the most
//	             holders seen at once (above P: over-admission)
//	rw-R-W       32 workers on one read-write lock, each operation a read
//	             with probability R% (else a write; R+W = 100), held 1ms,
//	             for -hot-duration; reports each kind's rate and wait, and
//	             counts any writer that overlapped another holder
//	election     3 candidates (each its own Locker and clients, terms from
//	             an in-memory fencer): the leader dies without resigning,
//	             one kill per contender per round; reports the time to
//	             the next leader and the term's increase (quorumlock, etcd
//	             with a clean Close, etcd-crash with its client dropped)
//
// Before the first scenario, lockbench waits (up to the TTL plus 5s; not
// with -past-window=false) until every Redis node has been up for the
// quorum contenders' restart window (their TTL): a node younger than that
// votes through the restart guard's young-node path (INFO server on every
// vote), a start-up transient that would otherwise weigh on the first
// scenarios' guard figures.
//
// Rounds interleave the contenders (A B C, then B C A, ...) so a machine
// whose speed drifts during the run shifts every contender alike. With no
// -addrs, lockbench starts a test bed of -nodes masters (QUORUMLOCK_TESTBED
// chooses the provider) and stops it afterwards; the fault scenarios need
// that bed and are skipped with -addrs. The bed has a 3-member etcd
// cluster when the etcd contender runs; with -addrs it runs on the
// members of -etcd-addrs, and without them it is left out (with a note).
// In the fault scenarios the etcd contender meets the same fault, on a
// follower (see etcdFollower). Traffic goes only to the given addresses or
// to the bed it started, and every loop is bounded by an op count, a
// duration or a context deadline.
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
	"strings"
	"syscall"
	"time"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/internal/benchkit"
)

// config is the parsed command line.
type config struct {
	addrs []string
	// etcdAddrs are the etcd members given with -addrs (none: etcd runs
	// only on a bed lockbench starts).
	etcdAddrs []string
	nodes     int
	rounds    int
	ops       int
	ttl       time.Duration
	// etcdTTL is the etcd contender's session TTL.
	etcdTTL time.Duration
	fsync   string
	timeout time.Duration
	// only lists the contenders that run, in no particular order.
	only        []string
	scenarios   []scenario
	hotDuration time.Duration
	opTimeout   time.Duration
	faultBudget time.Duration
	slowLatency time.Duration
	// multiWorkers and multiPool are the workers and the key pool of the
	// multi scenarios; seed seeds their key picks.
	multiWorkers int
	multiPool    int
	seed         uint64
	jsonPath     string
	plotPath     string
	cpuProfile   string
	quiet        bool
	// pastWindow: wait until the nodes are past the restart window first.
	pastWindow bool
	// notes are remarks of the parse for the report (a contender left out).
	notes []string
}

// wants reports whether contender name runs.
func (c config) wants(name string) bool { return slices.Contains(c.only, name) }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "lockbench:", err)
		os.Exit(1)
	}
}

// parse reads and validates the flags.
func parse(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("lockbench", flag.ContinueOnError)
	addrs := fs.String("addrs", "", "comma-separated Redis masters (default: start a test bed)")
	etcdAddrs := fs.String("etcd-addrs", "", "with -addrs: comma-separated client host:port of the etcd members the etcd contender runs on (without -addrs: the bed's 3-member cluster)")
	only := fs.String("only", "", "comma-separated contenders to run (default: all): "+strings.Join(slices.Concat(contenderNames, primitiveOnlyNames), ", "))
	scen := fs.String("scenarios", strings.Join(defaultScenarios, ","),
		"comma-separated scenarios: solo-N, hot-N-Hms, multi-K, slow-node, node-down, mixed-W-D-Hms, semaphore-P[-W], rw-R-W, election")
	fs.IntVar(&c.nodes, "nodes", 5, "masters in the bed started when -addrs is empty")
	fs.IntVar(&c.rounds, "rounds", 5, "rounds; each runs every contender once per scenario")
	fs.IntVar(&c.ops, "ops", 2000, "lock+unlock pairs per contender per round in the solo and fault scenarios")
	fs.DurationVar(&c.ttl, "ttl", 2*time.Second, "lock TTL of the Redis contenders")
	fs.DurationVar(&c.etcdTTL, "etcd-ttl", defaultEtcdTTL, "session TTL of the etcd contender (at least 2s, rounded up to whole seconds; see etcd.go for why not -ttl)")
	fs.DurationVar(&c.timeout, "node-timeout", 0, "per-node timeout of quorumlock, and etcd's bound of each call that is not a wait (0: the libraries' defaults)")
	fs.StringVar(&c.fsync, "fsync", testbed.FsyncEverySec, "appendfsync of the bed started when -addrs is empty: always, everysec or off")
	fs.DurationVar(&c.hotDuration, "hot-duration", 2*time.Second, "length of one contender's round in the hot and multi scenarios, and of each of its three phases in the mixed ones")
	fs.DurationVar(&c.opTimeout, "op-timeout", 2*time.Second, "bound of one lock+unlock pair in the fault scenarios, and of one unlock in the hot, multi and mixed ones")
	fs.DurationVar(&c.faultBudget, "fault-budget", 5*time.Second, "a fault scenario's round of one contender starts no pair after this long")
	fs.DurationVar(&c.slowLatency, "slow-latency", 20*time.Millisecond, "latency added to the last node in slow-node")
	fs.IntVar(&c.multiWorkers, "multi-workers", 16, fmt.Sprintf("workers of the multi-K scenarios (1..%d)", maxWorkers))
	fs.IntVar(&c.multiPool, "multi-pool", 8, fmt.Sprintf("keys the leases of the multi-K scenarios pick theirs from (2..%d, at least K)", maxKeyPool))
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the multi-K scenarios' key picks (every contender gets the same picks in a round)")
	fs.StringVar(&c.jsonPath, "json", "", "write every figure as JSON to this file")
	fs.StringVar(&c.plotPath, "plot", "", "draw latency CDFs, one panel per scenario, into this PNG file")
	fs.BoolVar(&c.quiet, "quiet", false, "no progress bar on stderr")
	fs.BoolVar(&c.pastWindow, "past-window", true, "before the first scenario, wait (up to -ttl + 5s) until every node has been up for the quorum contenders' restart window (-ttl)")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the measured runs (bed start-up excluded) to this file, for go tool pprof")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := c.parseTargets(*addrs, *etcdAddrs, *only); err != nil {
		return c, err
	}
	seen := map[string]bool{}
	for _, name := range strings.Split(*scen, ",") {
		sc, err := parseScenario(name)
		if err != nil {
			return c, fmt.Errorf("-scenarios: %w", err)
		}
		if seen[sc.name] {
			return c, fmt.Errorf("-scenarios: %q given twice", sc.name)
		}
		seen[sc.name] = true
		if sc.kind == kindMulti {
			sc.workers, sc.pool = c.multiWorkers, c.multiPool
		}
		c.scenarios = append(c.scenarios, sc)
	}
	return c, c.validate()
}

// parseTargets reads -addrs, -etcd-addrs and -only. Without -only every
// contender runs, but etcd is left out (with a note) when -addrs names the
// Redis masters and -etcd-addrs no etcd member.
func (c *config) parseTargets(addrs, etcdAddrs, only string) error {
	split := func(flag, v string) ([]string, error) {
		if v == "" {
			return nil, nil
		}
		list := strings.Split(v, ",")
		if slices.Contains(list, "") {
			return nil, fmt.Errorf("%s %q: empty address", flag, v)
		}
		return list, nil
	}
	var err error
	if c.addrs, err = split("-addrs", addrs); err != nil {
		return err
	}
	if c.etcdAddrs, err = split("-etcd-addrs", etcdAddrs); err != nil {
		return err
	}
	all := slices.Concat(contenderNames, primitiveOnlyNames)
	if only == "" {
		c.only = all
		if len(c.addrs) > 0 && len(c.etcdAddrs) == 0 {
			c.only = slices.DeleteFunc(c.only, func(n string) bool { return n == nameEtcd })
			c.notes = append(c.notes, "etcd not run: -addrs without -etcd-addrs names no etcd cluster")
		}
		return nil
	}
	c.only = strings.Split(only, ",")
	for _, n := range c.only {
		if !slices.Contains(all, n) {
			return fmt.Errorf("-only: unknown contender %q: want some of %s", n, strings.Join(all, ", "))
		}
	}
	return nil
}

// validate checks the bounds of the parsed flags.
func (c config) validate() error {
	nodes := c.nodes
	if len(c.addrs) > 0 {
		nodes = len(c.addrs)
	}
	switch {
	case c.rounds < 1 || c.rounds > 100:
		return fmt.Errorf("-rounds %d: want 1..100", c.rounds)
	case c.ops < 1 || c.ops > 1_000_000:
		return fmt.Errorf("-ops %d: want 1..1000000", c.ops)
	case c.nodes < 1 || c.nodes > 15:
		return fmt.Errorf("-nodes %d: want 1..15", c.nodes)
	case len(c.addrs) > 15:
		return fmt.Errorf("-addrs: %d addresses: want at most 15", len(c.addrs))
	case len(c.etcdAddrs) > 0 && len(c.addrs) == 0:
		return errors.New("-etcd-addrs needs -addrs: without -addrs the bed lockbench starts has its own etcd cluster")
	case c.wants(nameEtcd) && len(c.addrs) > 0 && len(c.etcdAddrs) == 0:
		return errors.New("-only etcd with -addrs needs -etcd-addrs, the etcd members")
	case c.etcdTTL < minEtcdTTL || c.etcdTTL > time.Hour:
		return fmt.Errorf("-etcd-ttl %v: want %v (etcd's shortest lease)..1h", c.etcdTTL, minEtcdTTL)
	case c.ttl < 100*time.Millisecond:
		return fmt.Errorf("-ttl %v: want at least 100ms", c.ttl)
	case c.timeout < 0:
		return fmt.Errorf("-node-timeout %v: want 0 (the default) or more", c.timeout)
	case c.hotDuration < 10*time.Millisecond || c.hotDuration > 10*time.Minute:
		return fmt.Errorf("-hot-duration %v: want 10ms..10m", c.hotDuration)
	case c.opTimeout < 10*time.Millisecond || c.opTimeout > time.Minute:
		return fmt.Errorf("-op-timeout %v: want 10ms..1m", c.opTimeout)
	case c.faultBudget < 100*time.Millisecond || c.faultBudget > 10*time.Minute:
		return fmt.Errorf("-fault-budget %v: want 100ms..10m", c.faultBudget)
	case c.slowLatency < time.Millisecond || c.slowLatency > time.Second:
		return fmt.Errorf("-slow-latency %v: want 1ms..1s", c.slowLatency)
	case c.plotPath != "" && !strings.HasSuffix(strings.ToLower(c.plotPath), ".png"):
		return fmt.Errorf("-plot %q: want a .png file", c.plotPath)
	case c.multiWorkers < 1 || c.multiWorkers > maxWorkers:
		return fmt.Errorf("-multi-workers %d: want 1..%d", c.multiWorkers, maxWorkers)
	case c.multiPool < 2 || c.multiPool > maxKeyPool:
		return fmt.Errorf("-multi-pool %d: want 2..%d", c.multiPool, maxKeyPool)
	}
	for _, sc := range c.scenarios {
		switch {
		case sc.fault() && len(c.addrs) == 0 && nodes < 3:
			return fmt.Errorf("-scenarios %s: needs -nodes 3 or more (a majority must survive the faulty node)", sc.name)
		case sc.kind == kindMulti && sc.keys > c.multiPool:
			return fmt.Errorf("-scenarios %s: %d keys per lease, but -multi-pool is %d", sc.name, sc.keys, c.multiPool)
		}
	}
	return nil
}

// run parses args, runs the benchmark and writes the report to out.
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
	s := summarizeRun(res)
	report(out, s)
	if cfg.jsonPath != "" {
		if err := writeJSON(cfg.jsonPath, s); err != nil {
			return err
		}
	}
	if cfg.plotPath != "" {
		if err := writePlot(cfg.plotPath, s); err != nil {
			return err
		}
	}
	return nil
}
