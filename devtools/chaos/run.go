package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quorumlock/quorumlock/devtools/checker"
	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/etcdbed"
	"github.com/quorumlock/quorumlock/fencing"
	"github.com/quorumlock/quorumlock/internal/wait"
)

// InitialStock is the workload's starting stock: far more than a run
// sells, so every write is a decrement that the row can take.
const InitialStock = 1_000_000

// Env is a bed prepared for the workload: every worker slot has its own
// link to every Redis node, so a partition can cut one client off.
type Env struct {
	bed      *testbed.Bed
	launcher Launcher
	workers  int
	links    [][]*testbed.Link // [worker slot][node]
	pool     *pgxpool.Pool
	clock    []time.Duration // each Redis node's clock offset so far
	logf     func(format string, args ...any)
	minRun   time.Duration
	// etcd is a client of every etcd member, for the resets; nil on a bed
	// without etcd. etcdClock is each member's wall clock offset.
	etcd      *clientv3.Client
	etcdClock []time.Duration
}

// EnvOptions shapes an Env.
type EnvOptions struct {
	// Workers is the number of worker processes of each run (default 4).
	Workers int
	// Logf receives progress lines; nil discards them.
	Logf func(format string, args ...any)
	// MinRun keeps each run's workload going at least this long, faults
	// or not, so every row has a body of ordinary operations too.
	MinRun time.Duration
}

// NewEnv prepares bed, which must have 5 Redis nodes and Postgres, for the
// workload; the scenarios of etcdlock also need its etcd members
// (testbed.Options.Etcd: 3). Close it before the bed.
func NewEnv(ctx context.Context, bed *testbed.Bed, l Launcher, opts EnvOptions) (*Env, error) {
	if len(bed.Redis) != 5 || bed.Postgres == nil {
		return nil, errors.New("chaos: the bed needs 5 Redis nodes and Postgres")
	}
	if opts.Workers <= 0 {
		opts.Workers = 4
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	e := &Env{bed: bed, launcher: l, workers: opts.Workers, logf: opts.Logf, minRun: opts.MinRun, clock: make([]time.Duration, len(bed.Redis))}
	for w := 0; w < opts.Workers+4; w++ { // spare slots for replacement workers
		var row []*testbed.Link
		for _, n := range bed.Redis {
			lk, err := n.Link(fmt.Sprintf("worker%d", w))
			if err != nil {
				return nil, err
			}
			row = append(row, lk)
		}
		e.links = append(e.links, row)
	}
	pool, err := pgxpool.New(ctx, bed.Postgres.DSN())
	if err != nil {
		return nil, err
	}
	e.pool = pool
	if err := fencing.EnsureSchema(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	if len(bed.Etcd) > 0 {
		if e.etcd, err = etcdbed.Client(bed); err != nil {
			pool.Close()
			return nil, err
		}
		e.etcdClock = make([]time.Duration, len(bed.Etcd))
	}
	return e, nil
}

// Close releases the Env's database pool and etcd client. The links close
// with the bed.
func (e *Env) Close() {
	e.pool.Close()
	if e.etcd != nil {
		_ = e.etcd.Close()
	}
}

// Result is what one run of one scenario found.
type Result struct {
	Scenario string
	// Lock is the backend: LockQuorum or LockEtcd.
	Lock   string
	Faults string
	Fenced bool
	Guard  bool
	// Injected counts the faults the nemesis injected.
	Injected int
	// Locks and Attempts count granted leases and lock calls.
	Locks, Attempts int
	// Accepted and Rejected count the writes the row took and refused.
	Accepted, Rejected int
	// Errors counts operations that failed for another reason.
	Errors int
	// Lost counts lost updates (accepted decrements that the final stock
	// does not show). In a cart run it counts units: per product, how far
	// the final stock is from the initial stock less the units of the
	// committed carts that name it, summed.
	Lost int64
	// Torn counts committed carts that were not applied whole (a product
	// without its line, a line that did not take exactly the cart's units
	// off the row as it stood) and carts that left lines without
	// committing; 0 outside cart runs.
	Torn int
	// Broken counts the violations a primitive workload's checker found
	// at its resource (devtools/checker's model resources); 0 in the
	// other workloads.
	Broken int
	// MaxHolders is the most holders inside the semaphore workloads'
	// resource at once; 0 in the other workloads.
	MaxHolders int
	// Refused counts carts a stock condition refused (a product sold out);
	// their transactions rolled back.
	Refused int
	// StaleAccepted counts accepted writes whose fence was not above the
	// previous accepted write's.
	StaleAccepted int
	// Overlaps counts pairs of leases on the key that overlapped in time:
	// double grants by the lock itself.
	Overlaps int
	// Linearizable is porcupine's verdict on the fenced register ("yes" or
	// "no"), or "-" for unfenced runs.
	Linearizable string
	Elapsed      time.Duration
	// Violations lists every safety violation, one line each.
	Violations []string
	// Notes lists what the run's staging observed (double grants staged,
	// stages that timed out).
	Notes []string
	// History is every event the workers reported, in arrival order.
	History []Event
}

// ViolationCount is the number of safety violations: every lost update,
// every accepted stale fence, every torn cart, every violation found at a
// primitive's resource, and one for a history that is not linearizable.
func (r Result) ViolationCount() int64 {
	n := r.Lost
	if n < 0 {
		n = -n
	}
	n += int64(r.StaleAccepted) + int64(r.Torn) + int64(r.Broken)
	if r.Linearizable == "no" {
		n++
	}
	return n
}

// Safe reports whether the run found no lost update, no accepted stale
// fence and (fenced runs) a linearizable history.
func (r Result) Safe() bool { return len(r.Violations) == 0 }

// run is one scenario run in progress.
type run struct {
	env    *Env
	sc     Scenario
	fenced bool
	seed   uint64
	rng    *rand.Rand
	hist   *history
	procs  map[int]*proc
	nextID int

	notesMu sync.Mutex // a nemesis and a client fault may note at once
	notes   []string
}

func (r *run) note(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	r.notesMu.Lock()
	r.notes = append(r.notes, s)
	r.notesMu.Unlock()
	r.env.logf("%s (fenced=%v): %s", r.sc.ID(), r.fenced, s)
}

func (r *run) config(id int) WorkerConfig {
	cfg := WorkerConfig{ID: id, Lock: r.sc.Lock, DSN: r.env.bed.Postgres.DSN(), Fenced: r.fenced, Guard: r.sc.Guard,
		Seed: r.seed, Rounds: 10000, TTL: r.sc.TTL, NodeTimeout: r.sc.TTL / 10,
		Hold: r.sc.TTL / 10, LongHold: r.sc.TTL * 13 / 10, LongFrac: r.sc.LongFrac, Carts: r.sc.Carts, Prim: r.sc.Prim}
	if r.sc.Lock == LockEtcd {
		cfg.Etcd = r.env.bed.EtcdEndpoints()
		return cfg
	}
	for _, lk := range r.env.links[id] {
		cfg.Redis = append(cfg.Redis, lk.Addr())
	}
	return cfg
}

// spawn starts a worker in the next free slot.
func (r *run) spawn() (*proc, error) {
	if r.nextID >= len(r.env.links) {
		return nil, errors.New("chaos: no worker slot left")
	}
	p, err := r.env.launcher.start(r.config(r.nextID), r.hist)
	if err != nil {
		return nil, err
	}
	r.procs[r.nextID] = p
	r.nextID++
	return p, nil
}

// reset puts the bed and the tables in their starting state.
func (e *Env) reset(ctx context.Context) error {
	if err := e.resetRedis(ctx); err != nil {
		return err
	}
	if err := e.resetEtcd(ctx); err != nil {
		return err
	}
	_, err := e.pool.Exec(ctx, `
		DROP TABLE IF EXISTS `+stockTable+`, `+writesTable+`;
		CREATE TABLE `+stockTable+` (product_id text PRIMARY KEY, available bigint NOT NULL, last_fence bigint NOT NULL DEFAULT 0);
		CREATE TABLE `+writesTable+` (seq bigserial PRIMARY KEY, fence bigint NOT NULL, worker int NOT NULL, read bigint NOT NULL, wrote bigint NOT NULL);
		INSERT INTO `+stockTable+` (product_id, available) VALUES ('`+product+`', `+fmt.Sprint(InitialStock)+`);`+
		cartSchema()+primSchema())
	return err
}

// resetRedis heals every link and node, sets every node's wall clock
// back (on a bed with Options.Clock), and empties the nodes.
func (e *Env) resetRedis(ctx context.Context) error {
	for _, row := range e.links {
		for _, lk := range row {
			if err := lk.Heal(ctx); err != nil {
				return err
			}
			if err := lk.AddLatency(ctx, 0); err != nil {
				return err
			}
		}
	}
	for i, n := range e.bed.Redis {
		_ = n.Resume(ctx)
		if err := n.SetClockOffset(ctx, 0); err != nil && !errors.Is(err, errors.ErrUnsupported) {
			return err
		}
		e.clock[i] = 0
		if err := n.AddLatency(ctx, 0); err != nil {
			return err
		}
		if err := n.Heal(ctx); err != nil {
			return err
		}
		c := n.Admin()
		err := c.FlushAll(ctx).Err()
		_ = c.Close()
		if err != nil {
			return fmt.Errorf("%s: flushall: %w", n.Name(), err)
		}
	}
	return nil
}

// Run runs scenario sc once, fenced or not, with faults drawn from seed.
func (e *Env) Run(ctx context.Context, sc Scenario, fenced bool, seed uint64) (Result, error) {
	start := time.Now()
	res := Result{Scenario: sc.Name, Lock: sc.Lock, Faults: sc.Faults, Fenced: fenced, Guard: sc.Guard}
	if sc.NA != "" {
		return res, fmt.Errorf("%s does not run: %s", sc.ID(), sc.NA)
	}
	if sc.Lock == LockEtcd && e.etcd == nil {
		return res, fmt.Errorf("%s: the bed has no etcd members (testbed.Options.Etcd)", sc.ID())
	}
	if err := e.reset(ctx); err != nil {
		return res, err
	}
	r := &run{env: e, sc: sc, fenced: fenced, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x5eed)), hist: newHistory(), procs: map[int]*proc{}}
	var stopErrs []error
	stopAll := func() {
		for _, id := range sortedIDs(r.procs) {
			p := r.procs[id]
			if err := p.stop(3*sc.TTL + 15*time.Second); err != nil && !isSignalled(err) {
				stopErrs = append(stopErrs, fmt.Errorf("worker %d: %w: %s", id, err, lastLines(p.stderrText(), 40)))
			}
		}
	}
	for i := 0; i < e.workers; i++ {
		if _, err := r.spawn(); err != nil {
			stopAll()
			return res, err
		}
	}
	injected, derr := sc.drive(ctx, r)
	if derr == nil {
		_ = wait.Sleep(ctx, e.minRun-time.Since(start))
	}
	stopAll()
	res.Injected = injected
	res.Notes = r.notes
	if derr != nil {
		return res, fmt.Errorf("%s: %w", sc.ID(), derr)
	}
	if err := errors.Join(stopErrs...); err != nil {
		return res, err
	}
	if err := e.judge(ctx, r, &res); err != nil {
		return res, err
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

func sortedIDs(m map[int]*proc) []int {
	ids := make([]int, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return ids
}

func isSignalled(err error) bool {
	return err != nil && strings.Contains(err.Error(), "signal:")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// store is what the database holds at the end of a run, per lock key.
type store struct {
	// initial is each key's row's starting value.
	initial map[string]int64
	// accepted lists the writes each row took, in commit order.
	accepted []checker.Write
	// committed counts the rounds whose writes committed.
	committed int
	// violations, lost and torn are the workload's own balance checks.
	violations []string
	lost       int64
	torn       int
}

// judge reads the rows and the write log and runs every check.
func (e *Env) judge(ctx context.Context, r *run, res *Result) error {
	if r.sc.Prim != "" {
		return e.judgePrim(ctx, r, res)
	}
	read := e.readRegister
	if r.sc.Carts {
		read = e.readCarts
	}
	st, err := read(ctx)
	if err != nil {
		return err
	}
	events := r.hist.all()
	res.History = events
	holds, ops, counts := digest(events)
	res.Locks, res.Attempts = counts.locks, counts.attempts
	res.Accepted, res.Rejected, res.Refused, res.Errors = st.committed, counts.rejected, counts.refused, counts.errors
	res.Lost, res.Torn = st.lost, st.torn
	fenc := checker.Fencing(st.accepted)
	res.StaleAccepted = len(fenc.Violations)
	res.Overlaps = len(checker.Exclusion(holds).Violations)
	res.Violations = append(res.Violations, st.violations...)
	res.Violations = append(res.Violations, fenc.Violations...)
	res.Linearizable = "-"
	if r.fenced {
		res.Linearizable = "yes"
		for _, k := range slices.Sorted(maps.Keys(st.initial)) {
			if lin := checker.Linearizable(st.initial[k], ops[k], time.Minute); !lin.OK() {
				res.Linearizable = "no"
				for _, v := range lin.Violations {
					res.Violations = append(res.Violations, k+": "+v)
				}
			}
		}
	}
	// The workers saw accepted writes too; a commit that the worker saw
	// fail can only come from a cancelled commit, which the workload does
	// not do, so the two counts must agree.
	if counts.written != st.committed {
		res.Notes = append(res.Notes, fmt.Sprintf("workers saw %d rounds' writes succeed, the database committed %d", counts.written, st.committed))
	}
	if counts.refused > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d carts refused for stock, rolled back whole", counts.refused))
	}
	return nil
}

// readRegister reads the single-key workload's row and write log.
func (e *Env) readRegister(ctx context.Context) (store, error) {
	var final int64
	if err := e.pool.QueryRow(ctx, "SELECT available FROM "+stockTable+" WHERE product_id = $1", product).Scan(&final); err != nil {
		return store{}, err
	}
	rows, err := e.pool.Query(ctx, "SELECT fence, worker FROM "+writesTable+" ORDER BY seq")
	if err != nil {
		return store{}, err
	}
	accepted, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (checker.Write, error) {
		var w checker.Write
		var worker int
		err := row.Scan(&w.Fence, &worker)
		w.Resource, w.Writer = LockKey, fmt.Sprintf("worker%d", worker)
		return w, err
	})
	if err != nil {
		return store{}, err
	}
	return store{initial: map[string]int64{LockKey: InitialStock}, accepted: accepted, committed: len(accepted),
		violations: checker.LostUpdates(InitialStock, final, len(accepted)).Violations,
		lost:       checker.Lost(InitialStock, final, len(accepted))}, nil
}

// tally counts lock calls and leases, and rounds by the answers their
// reads and writes got (a cart round counts once, whatever its rows).
type tally struct{ attempts, locks, written, rejected, refused, errors int }

type opKey struct{ worker, round int }

// callKey names one read or write of one key in one round.
type callKey struct {
	opKey
	key, op string
}

// grant is one granted lease, from the acquire's answer to the unlock call
// (or the validity end, if earlier).
type grant struct {
	from, until, to int64
	keys            []string
	fences          []int64
}

// digest turns events into the leases for the exclusion check (a hold per
// key of each lease) and each key's register operations for porcupine.
func digest(events []Event) ([]checker.Hold, map[string][]checker.RegisterOp, tally) {
	var t tally
	leases := map[opKey]*grant{}
	var order []opKey
	calls := map[callKey]Event{}
	ops := map[string][]checker.RegisterOp{}
	rounds := map[string]map[opKey]bool{}
	for _, e := range events {
		k := opKey{e.Worker, e.Round}
		switch {
		case e.Op == OpLock && e.Phase == PhaseCall:
			t.attempts++
		case e.Op == OpLock && e.Phase == PhaseReturn && e.Result == ResultOK:
			t.locks++
			keys, fences := e.held()
			leases[k] = &grant{from: e.At, until: e.Until, keys: keys, fences: fences}
			order = append(order, k)
		case (e.Op == OpHold || e.Op == OpUnlock) && e.Phase == PhaseCall:
			// The holder's latest view of the validity end: an etcd
			// session's keep-alive moves it on while the lease is held.
			if l := leases[k]; l != nil && l.to == 0 {
				if e.Until != 0 {
					l.until = e.Until
				}
				if e.Op == OpUnlock {
					l.to = e.At
				}
			}
		case (e.Op == OpRead || e.Op == OpWrite) && e.Phase == PhaseCall:
			calls[callKey{k, e.key(), e.Op}] = e
		case (e.Op == OpRead || e.Op == OpWrite) && e.Phase == PhaseReturn:
			ck := callKey{k, e.key(), e.Op}
			call, ok := calls[ck]
			if !ok {
				continue
			}
			delete(calls, ck)
			countRound(rounds, k, e)
			if op, ok := registerOp(call, e); ok {
				ops[e.key()] = append(ops[e.key()], op)
			}
		}
	}
	// Calls that never returned (the worker was killed) may have taken
	// effect.
	for ck, call := range calls {
		op, _ := registerOp(call, Event{Result: ResultError})
		op.Return = 0
		ops[ck.key] = append(ops[ck.key], op)
	}
	t.written, t.rejected, t.refused, t.errors = len(rounds[ResultOK]), len(rounds[ResultStale]), len(rounds[ResultRefused]), len(rounds[ResultError])
	return holdsOf(leases, order), ops, t
}

// countRound files round k under the answer of one of its reads or
// writes: written (an accepted write), rejected (a stale fence), refused
// or error.
func countRound(rounds map[string]map[opKey]bool, k opKey, e Event) {
	r := e.Result
	switch {
	case r == ResultAborted, r == ResultOK && e.Op != OpWrite:
		return
	case r != ResultOK && r != ResultStale && r != ResultRefused:
		r = ResultError
	}
	if rounds[r] == nil {
		rounds[r] = map[opKey]bool{}
	}
	rounds[r][k] = true
}

// registerOp is the register operation of a read or write call and its
// answer; false for a write that had no effect by construction (its cart
// rolled back for another reason: aborted, or refused by a condition).
func registerOp(call, ret Event) (checker.RegisterOp, bool) {
	op := checker.RegisterOp{Client: call.Worker, Kind: checker.OpClaim, Fence: call.Fence, Value: ret.Value, Call: call.At, Return: ret.At}
	if call.Op == OpWrite {
		op.Kind, op.Value = checker.OpWrite, call.Value
	}
	switch ret.Result {
	case ResultOK:
		op.Outcome = checker.Accepted
	case ResultStale:
		op.Outcome = checker.Rejected
	case ResultAborted, ResultRefused:
		return op, false
	default:
		op.Value, op.Outcome = call.Value, checker.Unknown
	}
	return op, true
}

// holdsOf turns the leases, in the order granted, into one hold per key.
func holdsOf(leases map[opKey]*grant, order []opKey) []checker.Hold {
	var holds []checker.Hold
	for _, k := range order {
		l := leases[k]
		to := l.until
		if l.to != 0 && l.to < to {
			to = l.to
		}
		for i, key := range l.keys {
			holds = append(holds, checker.Hold{Key: key, Holder: fmt.Sprintf("worker%d#%d", k.worker, k.round), Fence: l.fences[i],
				From: time.Unix(0, l.from), To: time.Unix(0, to)})
		}
	}
	return holds
}
