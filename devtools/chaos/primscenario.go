package chaos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quorumlock/quorumlock/devtools/nemesis"
)

// primScenarios are the rows of the primitive workloads on lock: the
// semaphore, the read-write lock and the election, each with holders
// paused past their TTL while a nemesis pauses, cuts off, and kills and
// restarts one node at a time; and the per-node counter semaphore with no
// fault at all (quorum's Redis only).
func primScenarios(lock string) []Scenario {
	ttl, nodes := 1500*time.Millisecond, "one Redis node at a time is paused, partitioned, killed and restarted (with or without its data; guard on), "+
		"or has its wall clock jumped 1.5 to 3 TTL ahead; then one worker at a time is cut off from two nodes through its own links"
	// A wall clock jump makes a Redis node expire keys early, which the
	// restart guard does not see: two of them within one extended lease
	// let a second holder in, so quorum's rows may double grant (the
	// fence must hold the resource). etcd expires a lease only when its
	// monotonic clock agrees: its rows must not.
	grant := (*bool)(nil)
	if lock == LockEtcd {
		ttl, grant = etcdTTL, no()
		nodes = "the leader, then a follower, in turn, is paused, partitioned, killed and restarted with its data, or has its wall clock jumped 1.5 to 3 TTL ahead"
	}
	const paused = " SIGSTOPped past its TTL until another "
	s := []Scenario{
		{Name: "semaphore", Prim: PrimSemaphore, Guard: lock == LockQuorum, TTL: ttl, LongFrac: 0.1, Short: lock == LockQuorum, Staged: true, Rounds: 3,
			DoubleGrant: grant, drive: primFaults,
			Faults: "4 workers on a semaphore of 2 permits, each entering the resource with its permit's fence (a row per permit key), " +
				"a tenth of the holds past the TTL; a holder" + paused + "holder of its permit wrote, while " + nodes},
		{Name: "rwlock", Prim: PrimRWLock, Guard: lock == LockQuorum, TTL: ttl, Staged: true, Rounds: 3, DoubleGrant: grant, drive: primFaults,
			Faults: "4 workers reading (a read lease, no fence) or writing (the write lease, fenced) at random; a writer" + paused +
				"writer wrote, before it enters the resource (readers are never paused: they carry no fence), while " + nodes},
		{Name: "election", Prim: PrimElection, Guard: lock == LockQuorum, TTL: ttl, LongFrac: 0.1, Staged: true, Rounds: 3, DoubleGrant: grant, drive: primFaults,
			Faults: "4 candidates; the leader writes with its term, holds (a tenth past the TTL), writes again, resigns; a leader" + paused +
				"leader wrote with a newer term, while " + nodes},
	}
	if lock == LockEtcd {
		s = append(s, Scenario{Name: "semaphore-countersem",
			NA: "the per-node counter semaphore runs on independent Redis masters; etcd's semaphore is one replicated log's"})
	} else {
		s = append(s, Scenario{Name: "semaphore-countersem", Prim: PrimCounter, TTL: ttl, Rounds: 1, drive: quiet(20 * time.Second),
			Faults: "no fault: the per-node counter semaphore (devtools/countersem, 2 permits, no fence) in place of the semaphore; " +
				"every worker tries at the same instants, each request to a node sent after a random 0 to 2ms; it must over-admit"})
	}
	return s
}

// primFaults pauses holders past their TTL (clientPause, Rounds times)
// while, one at a time, a nemesis pauses, partitions, kills and restarts,
// or jumps the wall clock of one node (2*Rounds steps), and then, on
// quorum, one worker at a time is cut off from two Redis nodes through its
// own links (Rounds times).
func primFaults(ctx context.Context, r *run) (int, error) {
	kinds := []nemesis.Kind{nemesis.Pause, nemesis.Partition, nemesis.KillRestartKeep, nemesis.KillRestartEmpty, nemesis.ClockJump}
	if r.sc.Lock == LockEtcd {
		// The bed restarts an etcd member with its data only.
		kinds = []nemesis.Kind{nemesis.Pause, nemesis.Partition, nemesis.KillRestartKeep, nemesis.ClockJump}
	}
	return pauseAmid(ctx, r, func(ctx context.Context, r *run) (int, error) {
		n, err := runNemesis(ctx, r, 2*r.sc.Rounds, kinds...)
		if err != nil || r.sc.Lock == LockEtcd {
			return n, err
		}
		m, err := partitionFromOne(ctx, r)
		return n + m, err
	})
}

// pauseAmid runs clientPause while nodes injects the node faults, and
// returns when both are done.
func pauseAmid(ctx context.Context, r *run, nodes func(context.Context, *run) (int, error)) (int, error) {
	nctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type done struct {
		n   int
		err error
	}
	faults := make(chan done, 1)
	go func() {
		n, err := nodes(nctx, r)
		faults <- done{n, err}
	}()
	paused, err := clientPause(ctx, r)
	if err != nil {
		cancel() // the nemesis heals what it broke and returns
	}
	d := <-faults
	return paused + d.n, errors.Join(err, d.err)
}

// primControl lists what is wrong with the unfenced run u of a staged
// primitive row: it must break the resource, and the semaphore's must let
// more holders in than it has permits.
func primControl(sc Scenario, u Result) []string {
	var bad []string
	if u.ViolationCount() == 0 {
		bad = append(bad, "negative control: the unfenced run broke nothing at the resource, so the staging did not bite")
	}
	if sc.Prim == PrimSemaphore && u.MaxHolders <= SemPermits {
		bad = append(bad, fmt.Sprintf("negative control: the unfenced run had at most %d holders inside, not more than the %d permits", u.MaxHolders, SemPermits))
	}
	return bad
}

// counterVerdict judges the counter semaphore's row: both runs (the
// permits have no fence, so the two are alike) must make progress and let
// more holders in than it has permits, with no fault.
func counterVerdict(p Pair) []string {
	var bad []string
	for _, r := range []Result{p.Fenced, p.Plain} {
		if r.Accepted == 0 {
			bad = append(bad, fmt.Sprintf("no progress (fenced=%v)", r.Fenced))
		}
		if r.MaxHolders <= SemPermits {
			bad = append(bad, fmt.Sprintf("negative control (fenced=%v): at most %d holders inside, not more than the %d permits", r.Fenced, r.MaxHolders, SemPermits))
		}
	}
	return bad
}

// primFigures renders what a primitive row's checker found, summed over
// its runs (the most holders inside: the largest of any run).
func primFigures(sc Scenario, t totals) string {
	s := fmt.Sprintf("resource violations %d", t.Broken)
	if sc.Prim == PrimSemaphore || sc.Prim == PrimCounter {
		s += fmt.Sprintf(", at most %d holders inside with %d permits", t.MaxHolders, SemPermits)
	}
	return s
}
