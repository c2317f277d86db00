package chaos

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/quorumlock/quorumlock/devtools/nemesis"
	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/internal/wait"
)

// Scenario is one row of the safety table: a nemesis and the lock settings
// it runs with, on one lock.
type Scenario struct {
	// Name identifies the scenario on the command line and in the table;
	// each lock has its own version of it (ID).
	Name string
	// Lock is the backend the scenario runs on: LockQuorum or LockEtcd.
	Lock string
	// NA, when set, says why the scenario does not apply to Lock: its row
	// is shown, with the reason, and not run.
	NA string
	// Faults describes what the nemesis does.
	Faults string
	// Guard turns the lock's restart guard on.
	Guard bool
	// TTL is the lock's TTL in this scenario.
	TTL time.Duration
	// LongFrac is the share of holds that outlast the TTL.
	LongFrac float64
	// Short marks the scenarios of the short suite that runs in make test.
	Short bool
	// Staged scenarios wait for the event that makes a late write happen,
	// so the unfenced run must lose updates: the negative control.
	Staged bool
	// DoubleGrant says whether the scenario must (true) or must not
	// (false) make the lock grant the key twice; nil when it may go
	// either way.
	DoubleGrant *bool
	// Rounds is the number of staged faults, or of nemesis steps.
	Rounds int
	// Carts runs the cart workload: each round takes one lease on 2 or 3
	// of the CartProducts and writes all their rows in one transaction.
	Carts bool
	// Prim runs a primitive's workload (PrimSemaphore, PrimRWLock,
	// PrimElection, PrimCounter) instead of the single key.
	Prim string

	drive func(ctx context.Context, r *run) (int, error)
}

// ID names the scenario on its lock: Name@Lock.
func (sc Scenario) ID() string { return sc.Name + "@" + sc.Lock }

func yes() *bool { b := true; return &b }
func no() *bool  { b := false; return &b }

// Restart kinds of the staged restart scenarios.
const (
	restartEmpty    = "empty"
	restartSnapshot = "snapshot"
	restartAOFTail  = "aof-tail"
	clockJump       = "clock-jump"
)

// Scenarios returns every scenario on every lock, in the order of the
// table: each of quorum's, followed by etcdlock's version of it.
func Scenarios() []Scenario {
	etcd := map[string]Scenario{}
	for _, sc := range etcdScenarios() {
		etcd[sc.Name] = sc
	}
	var out []Scenario
	for _, sc := range quorumScenarios() {
		out = append(out, sc)
		if e, ok := etcd[sc.Name]; ok {
			out = append(out, e)
		}
	}
	return out
}

// quorumScenarios are the scenarios on quorum's Redlock.
func quorumScenarios() []Scenario {
	const fast, staged = 1500 * time.Millisecond, 4 * time.Second
	s := []Scenario{
		{Name: "long-hold", Faults: "no nemesis; a quarter of the holds outlast the TTL (a GC-like stall in the holder)",
			TTL: fast, LongFrac: 0.25, Rounds: 1, DoubleGrant: no(), drive: quiet(12 * time.Second)},
		{Name: "client-pause", Faults: "a holder process SIGSTOPped mid critical section, past its TTL, until another holder wrote",
			TTL: fast, Short: true, Staged: true, Rounds: 3, DoubleGrant: no(), drive: clientPause},
		{Name: "client-kill", Faults: "a holder process SIGKILLed mid critical section; the TTL frees the lock; a new process replaces it",
			TTL: fast, Rounds: 2, DoubleGrant: no(), drive: clientKill},
		{Name: "node-pause", Faults: "one Redis node at a time SIGSTOPped (docker pause) for up to 2 TTL",
			TTL: fast, Guard: true, Rounds: 8, DoubleGrant: no(), drive: nodeFaults(nemesis.Pause)},
		{Name: "partition-2-from-1", Faults: "two nodes cut off from one client (its own links) while the others reach them",
			TTL: fast, Guard: true, Rounds: 8, DoubleGrant: no(), drive: partitionFromOne},
		{Name: "node-latency", Faults: "one node at a time answers late (up to 1.5 node timeouts)",
			TTL: fast, Guard: true, Rounds: 8, DoubleGrant: no(), drive: nodeFaults(nemesis.Latency)},
	}
	for _, kind := range []string{restartEmpty, restartSnapshot, restartAOFTail} {
		for _, guard := range []bool{false, true} {
			name := fmt.Sprintf("restart-%s/guard=%s", kind, map[bool]string{false: "off", true: "on"}[guard])
			dg := yes()
			if guard {
				dg = no()
			}
			s = append(s, Scenario{Name: name, Faults: restartFaults[kind], Guard: guard, TTL: staged,
				Short: kind == restartEmpty, Staged: !guard, DoubleGrant: dg, Rounds: 2, drive: stagedFault(kind)})
		}
	}
	s = append(s, Scenario{Name: "clock-jump", Guard: true, TTL: staged, Short: true, Staged: true, DoubleGrant: yes(), Rounds: 2,
		Faults: "a holder owns exactly 3 nodes (2 cut off from it); one of them jumps its wall clock forward by 2 TTL (LD_PRELOAD shim); guard on",
		drive:  stagedFault(clockJump)})
	s = append(s, Scenario{Name: "carts", Carts: true, Short: true, Guard: true, TTL: fast, Staged: true, DoubleGrant: no(), Rounds: 4,
		Faults: "one lease on 2-3 of 4 product keys (named in varied orders), every row written in one transaction; " +
			"a holder SIGSTOPped past its TTL until another cart wrote one of its products, while one Redis node at a time is paused or killed and restarted (with or without its data)",
		drive: cartFaults})
	s = slices.Insert(s, len(s)-1, Scenario{Name: clockJumpMonotonic,
		NA: "the bed moves no Redis server's monotonic clock, and Redis expires keys by its wall clock: the clock-jump row is quorum's clock fault"})
	s = append(s, primScenarios(LockQuorum)...)
	for i := range s {
		s[i].Lock = LockQuorum
	}
	return s
}

var restartFaults = map[string]string{
	restartEmpty:    "a holder owns exactly 3 nodes (2 cut off from it); one of them restarts without persistence",
	restartSnapshot: "a holder owns exactly 3 nodes (2 cut off from it); one of them restarts from an RDB snapshot older than the lease",
	restartAOFTail:  "a holder owns exactly 3 nodes (2 cut off from it); one of them (appendfsync everysec) is killed and loses its AOF tail",
}

// quiet lets the workload run for d with no nemesis.
func quiet(d time.Duration) func(ctx context.Context, r *run) (int, error) {
	return func(ctx context.Context, r *run) (int, error) {
		_ = wait.Sleep(ctx, d)
		return 0, ctx.Err()
	}
}

func isHold(worker int) func(Event) bool {
	return func(e Event) bool { return e.Op == OpHold && (worker < 0 || e.Worker == worker) }
}

// wroteAfter matches a write answer of another worker with a newer fence.
func wroteAfter(worker int, fence int64) func(Event) bool {
	return func(e Event) bool {
		return e.Op == OpWrite && e.Phase == PhaseReturn && e.Worker != worker && e.Fence > fence
	}
}

// readAfter matches a successful read of another worker with a newer fence.
func readAfter(worker int, fence int64) func(Event) bool {
	return func(e Event) bool {
		return e.Op == OpRead && e.Phase == PhaseReturn && e.Result == ResultOK && e.Worker != worker && e.Fence > fence
	}
}

func ownWrite(worker, round int) func(Event) bool {
	return func(e Event) bool {
		return e.Op == OpWrite && e.Phase == PhaseReturn && e.Worker == worker && e.Round == round
	}
}

// wroteOver matches a write answer of another worker with a newer fence on
// a key the hold h holds: of a cart, an accepted write on one of its
// products.
func wroteOver(h Event) func(Event) bool {
	if len(h.Keys) == 0 {
		return wroteAfter(h.Worker, h.Fence)
	}
	return func(e Event) bool {
		f, ok := h.fenceOf(e.Key)
		return ok && e.Op == OpWrite && e.Phase == PhaseReturn && e.Result == ResultOK && e.Worker != h.Worker && e.Fence > f
	}
}

// clientPause freezes a holder after its read, keeps it frozen until
// another worker has written under a newer lease, then thaws it: its write
// comes late.
func clientPause(ctx context.Context, r *run) (int, error) {
	ttl := r.sc.TTL
	injected, staged := 0, 0
	from := 0
	for tries := 0; (injected < r.sc.Rounds || staged == 0) && tries < 3*r.sc.Rounds && ctx.Err() == nil; tries++ {
		h, idx, ok := r.hist.waitFor(ctx, from, 20*ttl, isHold(-1))
		if !ok {
			r.note("no holder within %v", 20*ttl)
			continue
		}
		from = idx + 1
		p := r.procs[h.Worker]
		if err := p.pause(); err != nil {
			return injected, err
		}
		if r.wroteYet(idx, h) {
			r.note("worker %d wrote before the pause landed; not counted", h.Worker)
			if err := p.resume(); err != nil {
				return injected, err
			}
			continue
		}
		injected++
		_, _, over := r.hist.waitFor(ctx, idx, 10*ttl, wroteOver(h))
		if !over {
			r.note("no other holder wrote while worker %d was paused", h.Worker)
		}
		if err := p.resume(); err != nil {
			return injected, err
		}
		if _, j, ok := r.hist.waitFor(ctx, idx, 10*ttl, ownWrite(h.Worker, h.Round)); ok {
			from = j + 1
		}
		if over && r.landed(ctx, h, idx) {
			staged++
		}
	}
	return injected, ctx.Err()
}

// landed reports whether the late write of the paused hold h did what the
// staging needs. For a single key, another holder's write is enough. A
// cart must have been refused by the fence (fenced), or have committed
// (unfenced: a cart the scarce product's condition refused overwrote
// nothing). from is h's index.
func (r *run) landed(ctx context.Context, h Event, from int) bool {
	if len(h.Keys) == 0 {
		return true
	}
	own := ownWrite(h.Worker, h.Round)
	last := h.Keys[len(h.Keys)-1] // the rows answer in key order
	if _, _, ok := r.hist.waitFor(ctx, from, 10*r.sc.TTL, func(e Event) bool { return own(e) && e.Key == last }); !ok {
		r.note("worker %d's %s did not answer its write within %v", h.Worker, r.late(), 10*r.sc.TTL)
		return false
	}
	want := ResultOK
	if r.fenced {
		want = ResultStale
	}
	e, _, ok := r.hist.waitFor(ctx, from, 0, func(e Event) bool { return own(e) && e.Result != ResultAborted })
	if !ok || e.Result != want {
		r.note("worker %d's late %s answered %q, not %q; not counted", h.Worker, r.late(), e.Result, want)
		return false
	}
	r.note("worker %d's late %s (fences %v) answered %q", h.Worker, r.late(), h.Fences, e.Result)
	return true
}

// late names what a paused holder writes late: a cart, or a write.
func (r *run) late() string {
	if r.sc.Carts {
		return "cart"
	}
	return "write"
}

// wroteYet reports whether the holder of h had called its write before
// it was paused: the pause then missed the critical section.
func (r *run) wroteYet(from int, h Event) bool {
	_, _, ok := r.hist.waitFor(context.Background(), from, 0, func(e Event) bool {
		return e.Op == OpWrite && e.Worker == h.Worker && e.Round == h.Round
	})
	return ok
}

// clientKill crashes a holder after its read and waits for the lock to
// pass on once its TTL runs out; a new worker takes the dead one's place.
func clientKill(ctx context.Context, r *run) (int, error) {
	ttl := r.sc.TTL
	injected := 0
	from := 0
	for i := 0; i < r.sc.Rounds && ctx.Err() == nil; i++ {
		h, idx, ok := r.hist.waitFor(ctx, from, 20*ttl, isHold(-1))
		if !ok {
			r.note("round %d: no holder within %v", i, 20*ttl)
			continue
		}
		kctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := r.procs[h.Worker].kill(kctx)
		cancel()
		if err != nil {
			return injected, err
		}
		injected++
		_, j, ok := r.hist.waitFor(ctx, idx, 10*ttl, wroteAfter(h.Worker, h.Fence))
		if !ok {
			return injected, fmt.Errorf("round %d: nobody wrote within %v after worker %d was killed holding the lock", i, 10*ttl, h.Worker)
		}
		from = j + 1
		if _, err := r.spawn(); err != nil {
			return injected, err
		}
	}
	return injected, ctx.Err()
}

// nodeFaults runs a seeded nemesis plan of one fault kind on the nodes.
func nodeFaults(kind nemesis.Kind) func(ctx context.Context, r *run) (int, error) {
	return func(ctx context.Context, r *run) (int, error) {
		return runNemesis(ctx, r, r.sc.Rounds, kind)
	}
}

// runNemesis runs a seeded plan of steps faults of the given kinds, one
// node at a time: on the Redis nodes, or on the etcd members, the leader
// and a follower in turn.
func runNemesis(ctx context.Context, r *run, steps int, kinds ...nemesis.Kind) (int, error) {
	opts := nemesis.PlanOptions{Seed: r.seed, Nodes: len(r.env.bed.Redis), Steps: steps,
		Kinds: kinds, MaxFor: 2 * r.sc.TTL, MaxDelay: r.sc.TTL / 10 * 3 / 2, MaxJump: 3 * r.sc.TTL}
	cluster := nemesis.Redis(r.env.bed.Redis)
	if r.sc.Lock == LockEtcd {
		opts.Nodes, opts.Roles, opts.MaxFor = len(r.env.bed.Etcd), true, r.sc.TTL
		cluster = nemesis.Etcd(r.env.bed)
	}
	plan, err := nemesis.Plan(opts)
	if err != nil {
		return 0, err
	}
	n := 0
	roles := map[nemesis.Role]int{}
	err = nemesis.RunOn(ctx, cluster, plan, func(s nemesis.Step) {
		n++
		roles[s.Role]++
		r.env.logf("%s (fenced=%v): nemesis: %v", r.sc.ID(), r.fenced, s)
	})
	if r.sc.Lock == LockEtcd {
		r.note("%d member faults: %d on the leader, %d on a follower, %d with no leader found", n, roles[nemesis.Leader], roles[nemesis.Follower], roles[nemesis.AnyNode])
	}
	return n, err
}

// cartFaults pauses holders past their TTL (clientPause, Rounds times)
// while a nemesis pauses and kills and restarts one Redis node at a time
// (2*Rounds steps), and returns when both are done.
func cartFaults(ctx context.Context, r *run) (int, error) {
	kinds := []nemesis.Kind{nemesis.Pause, nemesis.KillRestartKeep, nemesis.KillRestartEmpty}
	if r.sc.Lock == LockEtcd {
		kinds = kinds[:2] // the bed restarts an etcd member with its data only
	}
	return pauseAmid(ctx, r, func(ctx context.Context, r *run) (int, error) {
		return runNemesis(ctx, r, 2*r.sc.Rounds, kinds...)
	})
}

// partitionFromOne cuts two nodes off from one worker at a time, through
// that worker's own links.
func partitionFromOne(ctx context.Context, r *run) (int, error) {
	ttl := r.sc.TTL
	n := 0
	for i := 0; i < r.sc.Rounds && ctx.Err() == nil; i++ {
		w := r.rng.IntN(r.env.workers)
		a := r.rng.IntN(5)
		b := (a + 1 + r.rng.IntN(4)) % 5
		cut := []*testbed.Link{r.env.links[w][a], r.env.links[w][b]}
		for _, lk := range cut {
			if err := lk.Partition(ctx); err != nil {
				return n, err
			}
		}
		n++
		_ = wait.Sleep(ctx, ttl/2+time.Duration(r.rng.Int64N(int64(2*ttl))))
		heal := context.WithoutCancel(ctx)
		for _, lk := range cut {
			if err := lk.Heal(heal); err != nil {
				return n, err
			}
		}
		_ = wait.Sleep(ctx, time.Duration(r.rng.Int64N(int64(ttl/2))))
	}
	return n, ctx.Err()
}

// stagedFault stages Redlock's known double grant: worker 0 is cut off from
// nodes 3 and 4, so its lease holds exactly nodes 0, 1 and 2. Once it holds
// and has read, it is frozen, and one of its three nodes forgets the key
// (kind says how). Without the guard, another worker then wins that node
// with 3 and 4: two holders at once. The frozen worker is thawed when the
// other has written, or well inside its own lease when nobody could.
func stagedFault(kind string) func(ctx context.Context, r *run) (int, error) {
	return func(ctx context.Context, r *run) (int, error) {
		ttl := r.sc.TTL
		nodes := r.env.bed.Redis
		a := r.procs[0]
		injected, staged := 0, 0
		// A staged scenario goes on past its rounds, a bounded number of
		// times, until one round has staged the late write.
		for i := 0; (injected < r.sc.Rounds || r.sc.Staged && staged == 0) && i < 3*r.sc.Rounds && ctx.Err() == nil; i++ {
			victim := r.rng.IntN(3)
			var snap testbed.Snapshot
			if kind == restartSnapshot {
				var err error
				if snap, err = nodes[victim].Snapshot(ctx); err != nil {
					return injected, err
				}
			}
			h, idx, ok, err := r.holdCutOff(ctx, i)
			if err != nil {
				return injected, err
			}
			if !ok {
				continue
			}
			if err := forget(ctx, r, kind, victim, snap); err != nil {
				_ = a.resume()
				return injected, err
			}
			injected++
			until := time.Unix(0, h.Until)
			// Once a second holder has read, worker 0's write is late
			// whatever happens next. Thaw it then, or inside its own lease
			// if nobody else gets that far.
			wait := time.Until(until) - ttl/4
			if e, _, ok := r.hist.waitFor(ctx, idx, max(wait, 0), readAfter(0, h.Fence)); ok {
				staged++
				r.note("round %d: node %d forgot (%s); worker %d read under fence %d while worker 0 held fence %d", i, victim, kind, e.Worker, e.Fence, h.Fence)
			} else {
				r.note("round %d: node %d forgot (%s); nobody else read during worker 0's lease", i, victim, kind)
			}
			if err := a.resume(); err != nil {
				return injected, err
			}
			if err := healLinks(ctx, r); err != nil {
				return injected, err
			}
			if _, _, ok := r.hist.waitFor(ctx, idx, 10*ttl, ownWrite(0, h.Round)); !ok {
				r.note("round %d: worker 0 did not answer its write within %v", i, 10*ttl)
			}
		}
		return injected, ctx.Err()
	}
}

// holdCutOff cuts worker 0 off from nodes 3 and 4 and freezes it once it
// holds a fresh lease, which then holds exactly nodes 0, 1 and 2. ok is
// false when round i could not stage that (no lease in time, or its write
// came before the pause): worker 0 runs again and its links are healed.
func (r *run) holdCutOff(ctx context.Context, i int) (Event, int, bool, error) {
	ttl := r.sc.TTL
	a := r.procs[0]
	for _, lk := range r.env.links[0][3:] {
		if err := lk.Partition(ctx); err != nil {
			return Event{}, 0, false, err
		}
	}
	// Worker 0 must take a fresh lease now that it is cut off. It needs
	// all three nodes it still reaches, which the others, reaching five,
	// would rarely leave it: they wait at their gates, outside any lease,
	// until it holds.
	from := r.hist.len()
	if err := r.gateOthers(0, true); err != nil {
		return Event{}, 0, false, err
	}
	h, idx, ok := r.hist.waitFor(ctx, from, 6*ttl+20*time.Second, isHold(0))
	if ok {
		if err := a.pause(); err != nil {
			return h, idx, false, err
		}
	}
	if err := r.gateOthers(0, false); err != nil {
		return h, idx, false, err
	}
	if ok && !r.wroteYet(idx, h) {
		return h, idx, true, nil
	}
	if ok {
		r.note("round %d: worker 0 wrote before the pause landed; not counted", i)
		if err := a.resume(); err != nil {
			return h, idx, false, err
		}
	} else {
		r.note("round %d: worker 0 held no lease within %v", i, 6*ttl+20*time.Second)
	}
	return h, idx, false, healLinks(ctx, r)
}

// gateOthers closes or opens the gate of every worker but one.
func (r *run) gateOthers(except int, closed bool) error {
	for id, p := range r.procs {
		if id == except {
			continue
		}
		select {
		case <-p.done:
			continue
		default:
		}
		if err := p.gate(closed); err != nil {
			return fmt.Errorf("worker %d: gate: %w", id, err)
		}
	}
	return nil
}

func healLinks(ctx context.Context, r *run) error {
	for _, lk := range r.env.links[0] {
		if err := lk.Heal(context.WithoutCancel(ctx)); err != nil {
			return err
		}
	}
	return nil
}

// forget makes node victim lose worker 0's key the way kind says.
func forget(ctx context.Context, r *run, kind string, victim int, snap testbed.Snapshot) error {
	n := r.env.bed.Redis[victim]
	switch kind {
	case restartEmpty:
		return n.Restart(ctx, false)
	case restartSnapshot:
		return n.RestartFromSnapshot(ctx, snap)
	case restartAOFTail:
		if _, err := n.KillLosingTail(ctx, 1); err != nil {
			return err
		}
		return n.Restart(ctx, true)
	case clockJump:
		r.env.clock[victim] += 2 * r.sc.TTL
		return n.SetClockOffset(ctx, r.env.clock[victim])
	}
	return fmt.Errorf("unknown fault %q", kind)
}
