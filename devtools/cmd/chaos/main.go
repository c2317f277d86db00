// Command chaos runs the Kleppmann workload under every nemesis on a fresh
// test bed, on both locks (quorum's Redlock on 5 Redis masters, etcdlock on
// a 3-member etcd cluster), each scenario with the fence and without it
// (the negative control), and writes the safety table (docs/SAFETY.md).
//
//	go run ./devtools/cmd/chaos                         # every scenario, table to stdout
//	go run ./devtools/cmd/chaos -out docs/SAFETY.md     # what `make chaos` runs
//	go run ./devtools/cmd/chaos -only client-pause      # one scenario, on both locks
//	go run ./devtools/cmd/chaos -lock etcdlock          # every scenario, on etcdlock only
//	go run ./devtools/cmd/chaos -short                  # the scenarios of the short suite
//	go run ./devtools/cmd/chaos -lock etcdlock -repeat 10   # each etcdlock row on 10 seeds
//
// A verdict from one run is a guess: -repeat N runs every selected row N
// times, run k on seed -seed + k, all rows once before any row again, and
// the table tallies each row over its runs ("0 double grants in 3 of 3
// runs"). It exits 1 when a verdict fails in any run: a fenced run that
// lost an update, accepted a stale fence or was not linearizable, a
// negative control that caught nothing, or a double grant where the lock
// must grant the key once. The run is bounded by -timeout (20 minutes by
// default); at the bound it writes the table of the runs that finished and
// fails.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/quorumlock/quorumlock/devtools/chaos"
	"github.com/quorumlock/quorumlock/devtools/testbed"
)

func main() {
	chaos.MaybeWorker()
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
}

type options struct {
	only    map[string]bool
	locks   map[string]bool
	short   bool
	seed    uint64
	repeat  int
	out     string
	timeout time.Duration
	workers int
	minRun  time.Duration
	history string
	args    []string // as given, for the table's header
}

func parse(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	only := fs.String("only", "", "comma-separated scenario names (default: all)")
	lock := fs.String("lock", "both", "the lock to run on: "+strings.Join(chaos.Locks, ", ")+" or both")
	o := options{args: args}
	fs.BoolVar(&o.short, "short", false, "only the scenarios of the short suite (make test)")
	fs.Uint64Var(&o.seed, "seed", 20261201, "seed of every nemesis (run k of -repeat: seed + k)")
	fs.IntVar(&o.repeat, "repeat", 1, "run every selected row this many times, each on its own seed (1..100)")
	fs.StringVar(&o.out, "out", "", "write the Markdown table to this file (default: stdout)")
	fs.DurationVar(&o.timeout, "timeout", 20*time.Minute, "bound on the whole run")
	fs.IntVar(&o.workers, "workers", 4, "worker processes per run")
	fs.StringVar(&o.history, "history", "", "write each run's history (JSON lines) into this directory")
	fs.DurationVar(&o.minRun, "min-run", 8*time.Second, "keep each run's workload going at least this long")
	err := fs.Parse(args)
	if err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.timeout <= 0 || o.workers < 2 || o.workers > 16 || o.repeat < 1 || o.repeat > 100 {
		return o, fmt.Errorf("bad -timeout %v, -workers %d or -repeat %d (want > 0, 2..16 and 1..100)", o.timeout, o.workers, o.repeat)
	}
	if o.locks, err = parseLock(*lock); err != nil {
		return o, err
	}
	known := map[string]bool{}
	for _, sc := range chaos.Scenarios() {
		known[sc.Name] = true
	}
	if *only != "" {
		o.only = map[string]bool{}
		for _, n := range strings.Split(*only, ",") {
			n = strings.TrimSpace(n)
			if !known[n] {
				return o, fmt.Errorf("unknown scenario %q", n)
			}
			o.only[n] = true
		}
	}
	return o, nil
}

// parseLock reads -lock: one lock, or both.
func parseLock(s string) (map[string]bool, error) {
	locks := map[string]bool{}
	for _, l := range chaos.Locks {
		if s == "both" || s == l {
			locks[l] = true
		}
	}
	if len(locks) == 0 {
		return nil, fmt.Errorf("unknown -lock %q: want %s or both", s, strings.Join(chaos.Locks, ", "))
	}
	return locks, nil
}

// selected lists the scenarios to show: those -only names on the locks
// -lock names (the short suite's with -short, and, without -short, the
// rows that do not apply, which show why).
func (o options) selected() []chaos.Scenario {
	var out []chaos.Scenario
	for _, sc := range chaos.Scenarios() {
		if (o.only == nil || o.only[sc.Name]) && o.locks[sc.Lock] && (!o.short || sc.Short) {
			out = append(out, sc)
		}
	}
	return out
}

// bedOptions is the bed the selected scenarios need: etcd only for
// etcdlock's.
func (o options) bedOptions() testbed.Options {
	opts := testbed.Options{Redis: 5, Postgres: true, AppendFsync: testbed.FsyncEverySec, Clock: true}
	if o.locks[chaos.LockEtcd] {
		opts.Etcd = 3
	}
	return opts
}

func run(args []string, stdout, stderr io.Writer) error {
	o, err := parse(args, stderr)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	start := time.Now()
	bed, err := testbed.New(ctx, o.bedOptions())
	if err != nil {
		return err
	}
	defer bed.Close()
	logf := func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }
	env, err := chaos.NewEnv(ctx, bed, chaos.Launcher{Path: self}, chaos.EnvOptions{Workers: o.workers, Logf: logf, MinRun: o.minRun})
	if err != nil {
		return err
	}
	defer env.Close()

	pairs, done, err := runAll(ctx, env, o, logf)
	if err != nil && len(pairs) == 0 {
		return err
	}
	var buf bytes.Buffer
	if werr := chaos.WriteMarkdown(&buf, pairs, header(o, bed.Provider, done, time.Since(start))); werr != nil {
		return werr
	}
	if o.out == "" {
		_, werr := stdout.Write(buf.Bytes())
		if werr != nil {
			return werr
		}
	} else if werr := writeBlock(o.out, buf.String()); werr != nil {
		return werr
	}
	if err != nil {
		return fmt.Errorf("stopped after %d of %d repetitions (the table has the runs that finished): %w", done, o.repeat, err)
	}
	var failed []string
	for _, r := range chaos.Rows(pairs) {
		for _, f := range r.Failures() {
			failed = append(failed, r.Scenario.ID()+" "+f)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d verdicts failed:\n  %s", len(failed), strings.Join(failed, "\n  "))
	}
	return nil
}

// runAll runs every selected row -repeat times, run k on seed -seed + k,
// every row once before any row again; a row that does not apply is shown
// once. It returns the pairs of the repetitions that finished, how many
// did, and what stopped it early.
func runAll(ctx context.Context, env *chaos.Env, o options, logf func(string, ...any)) ([]chaos.Pair, int, error) {
	var pairs []chaos.Pair
	for k := range o.repeat {
		var round []chaos.Pair
		for _, sc := range o.selected() {
			if sc.NA != "" && k > 0 {
				continue
			}
			p, err := runPair(ctx, env, o, sc, o.seed+uint64(k), logf)
			if err != nil {
				return pairs, k, err
			}
			round = append(round, p)
		}
		pairs = append(pairs, round...)
	}
	return pairs, o.repeat, nil
}

// runPair runs sc with the fence and without it, on the same seed; a
// scenario that does not apply to its lock is not run.
func runPair(ctx context.Context, env *chaos.Env, o options, sc chaos.Scenario, seed uint64, logf func(string, ...any)) (chaos.Pair, error) {
	p := chaos.Pair{Scenario: sc, Seed: seed}
	if sc.NA != "" {
		logf("%-36s n/a: %s", sc.ID(), sc.NA)
		return p, nil
	}
	for _, fenced := range []bool{true, false} {
		res, err := env.Run(ctx, sc, fenced, seed)
		if err != nil {
			return p, fmt.Errorf("%s seed %d (fenced=%v): %w", sc.ID(), seed, fenced, err)
		}
		logf("%-36s seed %d fenced=%-5v %3d faults %5d leases %5d accepted %3d rejected %3d refused  lost %3d  torn %3d  stale %3d  double grants %2d  linearizable %s  (%v)",
			sc.ID(), seed, fenced, res.Injected, res.Locks, res.Accepted, res.Rejected, res.Refused, res.Lost, res.Torn, res.StaleAccepted, res.Overlaps, res.Linearizable, res.Elapsed.Round(time.Second))
		if o.history != "" {
			if err := writeHistory(o.history, sc.ID(), seed, fenced, res.History); err != nil {
				return p, err
			}
		}
		if fenced {
			p.Fenced = res
		} else {
			p.Plain = res
		}
	}
	return p, nil
}

// writeHistory writes one run's events, one JSON object per line.
func writeHistory(dir, scenario string, seed uint64, fenced bool, events []chaos.Event) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	name := fmt.Sprintf("%s.seed%d.fenced=%v.jsonl", strings.NewReplacer("/", "_", "=", "-", "@", ".").Replace(scenario), seed, fenced)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, e := range events {
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o644)
}

// Markers around the generated block in the output file; the rest of the
// file is kept as it is.
const (
	beginMarker = "<!-- chaos:begin (written by make chaos; edit devtools/cmd/chaos instead) -->"
	endMarker   = "<!-- chaos:end -->"
)

// writeBlock puts block between the markers of the file at path, keeping
// everything outside them. A file without the markers gets the block
// appended; a missing file is created.
func writeBlock(path, block string) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	return os.WriteFile(path, []byte(splice(string(old), block)), 0o644)
}

func splice(old, block string) string {
	wrapped := beginMarker + "\n" + block + endMarker + "\n"
	b, e := strings.Index(old, beginMarker), strings.Index(old, endMarker)
	if b < 0 || e < b {
		if old != "" && !strings.HasSuffix(old, "\n\n") {
			old = strings.TrimRight(old, "\n") + "\n\n"
		}
		return old + wrapped
	}
	return old[:b] + wrapped + strings.TrimLeft(old[e+len(endMarker):], "\n")
}

// makeChaosArgs are the arguments `make chaos` runs with.
const makeChaosArgs = "-repeat 3 -timeout 60m -out docs/SAFETY.md"

func header(o options, provider string, repetitions int, took time.Duration) string {
	commit := "unknown"
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		commit = strings.TrimSpace(string(out))
	}
	var b strings.Builder
	b.WriteString("## Under faults: the chaos suite\n\n")
	by := "`" + strings.Join(append([]string{"go run ./devtools/cmd/chaos"}, o.args...), " ") + "`"
	if strings.Join(o.args, " ") == makeChaosArgs {
		by = "`make chaos` (" + by + ")"
	}
	fmt.Fprintf(&b, "Written by %s; every figure below is from that run.\n\n", by)
	seeds := fmt.Sprintf("seed %d", o.seed)
	if repetitions > 1 {
		seeds = fmt.Sprintf("every row run %d times, on seeds %d to %d", repetitions, o.seed, o.seed+uint64(repetitions)-1)
	}
	fmt.Fprintf(&b, "Run: commit %s, %s provider, %s, %d worker processes per run, %d CPUs, %s, %v in all.\n\n",
		commit, provider, seeds, o.workers, runtime.NumCPU(), time.Now().UTC().Format("2006-01-02"), took.Round(time.Second))
	b.WriteString(workload + definitions)
	return b.String()
}

const workload = `The workload (the Kleppmann case): worker processes lock ` + "`stock:42`" + `, read ` + "`available`" + ` outside any
transaction, hold the lease (briefly, or past the TTL where the scenario says so), write ` + "`available - 1`" + ` and
unlock. Each scenario runs twice on the same seed: with the fence (the read is ` + "`fencing.Table.Claim`" + `, the
write a claimed update) and without it (plain SELECT and UPDATE: the negative control). Every scenario runs on
both locks, each worker process building its own locker:

- **quorum**: the Redlock of package quorum on 5 Redis masters; its fences come from the Postgres issuer
  (` + "`quorum.WithFencer`" + `). TTL 1.5s (4s in the staged restart and clock rows).
- **etcdlock**: package etcdlock on a 3-member etcd cluster (etcd's concurrency recipe on one session per
  locker); its fence is ` + "`Lease.Fence`" + `, the etcd revision at which the lease became the owner, with no second
  system. TTL 4s in every row (etcdlock's sessions do not survive 2s or 3s: see devtools/chaos's etcdTTL).
  Node faults hit one member at a time, the leader and a follower in turn, for up to one TTL; the restart rows
  that etcd has no counterpart for say why.

`

const definitions = `- **violations**: lost updates (accepted decrements that the final stock does not show) plus accepted writes
  whose fence was not above the previous accepted write's, plus a non-linearizable fenced-register history
  (porcupine). With fencing this must be 0 in every row, on both locks.
- **stale writes rejected**: late writes the row refused (` + "`ErrStaleFence`" + `).
- **double grants**: pairs of leases on the key that overlapped in time (from the acquire's return to the
  unlock, or to the validity end as the holder last saw it, if earlier: an etcd session's keep-alive moves it
  on): the lock itself failed. The fence does not prevent them; it prevents their damage.
- Staged rows wait for the event that makes the late write happen, so their unfenced run must lose updates;
  a row that fails a verdict says so in its verdict.
- The **carts** row runs another workload: each round takes one lease on 2 or 3 of 4 product keys
  (` + "`LockMulti`" + `, the keys named in a random order), reads every row (a claim with that key's fence,
  ` + "`Lease.FenceOf`" + `), holds, then writes every row in one transaction (available := read - units, if
  available >= units: fenced and claimed, or plain), with a ledger entry and a line per row. One product is
  scarce, so carts that name it are refused once it is sold out and must roll back whole. Its counts are in
  carts and units: **units lost** per product (final stock against the initial stock less the units of the
  committed carts that name it), **torn carts** (a committed cart without a line per product, or a line that
  did not take exactly the cart's units off the row as it stood, or lines of a cart that did not commit), and
  the fence order, double grants and linearizability per product key. Its unfenced run must lose units and
  tear a cart.
- The **semaphore**, **rwlock** and **election** rows run the primitives (` + "`lease.Primitives`" + `) against a
  resource in Postgres: a row per slot (a permit's key, the lock's or the election's name) with the last fence it
  let in, and a log of the operations it accepted, in its order. A semaphore holder enters with its permit's fence
  and exits with a second fenced write; a reader records its read (no fence: readers are never paused); a writer
  enters and exits fenced; a leader writes twice with its term. devtools/checker's model resources judge the log:
  **resource violations** are more holders inside than permits or a permit held twice, a read overlapping an
  accepted write, two leaders in one term or a term going down, and an accepted fence below the last. The
  unfenced semaphore run must let more than 2 holders in. The **semaphore-countersem** row runs the semaphore's
  workload on the per-node counter semaphore (devtools/countersem, no fence) with no fault: both its runs must
  over-admit.
- Every row runs on several seeds (` + "`-repeat`" + `; run k on seed ` + "`-seed`" + ` + k), and each figure is tallied over
  its runs: "0 double grants in 3 of 3 runs" where it was 0 in every run, otherwise in how many runs it was not
  0 and each run's figure in seed order ("double grants in 1 of 3 runs (0, 1, 0)"); lost and stale accepted are
  sums. The verdict says in how many runs the row passed, or names the seed of every run that failed.
- The counts of leases and writes move from run to run with the machine's timing; what a rerun reproduces is
  what the verdicts assert: 0 violations with fencing, rejections and unfenced losses in the staged rows, double
  grants where quorum's restart guard is off, where a Redis node's wall clock jumps, and where the etcd leader's
  wall and monotonic clocks both jump, and none elsewhere.
`
