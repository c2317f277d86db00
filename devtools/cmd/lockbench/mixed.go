package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// mixedInstances is how many instances of each contender a mixed scenario
// runs side by side, as three service processes would, each with its own
// clients (and its own Locker or Redsync) on the same nodes and etcd
// cluster.
const mixedInstances = 3

// mixedTally is one contender's figures over the rounds of a mixed
// scenario: the hot key and the distinct keys, each alone and in the mix.
type mixedTally struct {
	hotAlone, hotMix           *tally
	distinctAlone, distinctMix *tally
	// Per-round ratios mixed/alone of the rates, for the rounds whose
	// alone rate was above 0.
	hotRatio, distinctRatio []float64
}

// addRound folds one round's three phases into t.
func (t *mixedTally) addRound(hotAlone, distinctAlone, hotMix, distinctMix sample) {
	t.hotAlone.add(hotAlone, true)
	t.distinctAlone.add(distinctAlone, false)
	t.hotMix.add(hotMix, true)
	t.distinctMix.add(distinctMix, false)
	if a := hotAlone.throughput(); a > 0 {
		t.hotRatio = append(t.hotRatio, hotMix.throughput()/a)
	}
	if a := distinctAlone.throughput(); a > 0 {
		t.distinctRatio = append(t.distinctRatio, distinctMix.throughput()/a)
	}
}

// openMixed opens the instances of the mixed scenarios: mixedInstances
// sets of clients on eps (one go-redis client of pool connections per node
// and one etcd client each), each with its own contenders, warmed up.
// Every set lists the same contenders in the same order as b.direct.
func (b *bench) openMixed(ctx context.Context, eps endpoints, pool int) error {
	for k := range mixedInstances {
		set, err := b.openSet(ctx, eps, pool, fmt.Sprintf("warm:mixed:%d", k))
		if err != nil {
			return fmt.Errorf("mixed instance %d: %w", k, err)
		}
		b.mixed = append(b.mixed, set)
	}
	return nil
}

// mixedPool is the client pool size of a mixed instance: room for every
// worker of the largest mixed scenario with a request out on each node.
func mixedPool(scs []scenario) int {
	pool := 0
	for _, sc := range scs {
		if sc.kind == kindMixed {
			pool = max(pool, 2*(sc.workers+sc.distinct)+8)
		}
	}
	return pool
}

// runMixed runs a mixed scenario on the mixed instances, rounds
// interleaving the contenders. Each round of each contender runs three
// phases of -hot-duration, in order: the hot key alone, the distinct keys
// alone, both at once.
func (b *bench) runMixed(ctx context.Context, sc scenario) *scenarioRun {
	// tallies hold the hot key in the mix, the scenario's headline.
	r := &scenarioRun{sc: sc}
	var idx []int // index of each running contender in every instance set
	for j, c := range b.mixed[0].list {
		if !sc.runs(c) {
			r.skipped = append(r.skipped, c.name)
			continue
		}
		idx = append(idx, j)
		mt := &mixedTally{hotAlone: &tally{name: c.name}, hotMix: &tally{name: c.name},
			distinctAlone: &tally{name: c.name}, distinctMix: &tally{name: c.name}}
		r.mixed = append(r.mixed, mt)
		r.tallies = append(r.tallies, mt.hotMix)
	}
	for round := range b.cfg.rounds {
		for k := range idx {
			if ctx.Err() != nil {
				return r
			}
			i := (round + k) % len(idx)
			insts := make([]contender, len(b.mixed))
			for n, set := range b.mixed {
				insts[n] = set.list[idx[i]]
			}
			prefix := fmt.Sprintf("lockbench:%s:%s:%s:%d", b.runID, sc.name, insts[0].name, round)
			b.mixedRound(ctx, sc, round, insts, prefix, r.mixed[i])
		}
	}
	return r
}

// mixedRound runs one round of one contender's instances: the hot key
// alone, the distinct keys alone, then both, each on keys of its own
// under prefix, and folds the samples into t.
func (b *bench) mixedRound(ctx context.Context, sc scenario, round int, insts []contender, prefix string, t *mixedTally) {
	var got [3][2]sample // per phase: hot, distinct
	for n, ph := range []struct {
		name          string
		hot, distinct bool
	}{{"hot-alone", true, false}, {"distinct-alone", false, true}, {"mixed", true, true}} {
		if ctx.Err() != nil {
			return
		}
		b.progress.Start(fmt.Sprintf("%s r%d %s %s", sc.name, round+1, ph.name, insts[0].name))
		p := mixedPhase{insts: insts, hold: sc.hold, duration: b.cfg.hotDuration, opTimeout: b.cfg.opTimeout}
		if ph.hot {
			p.hotKey, p.waiters = prefix+":"+ph.name+":hot", sc.workers
		}
		if ph.distinct {
			p.distinctPrefix, p.workers = prefix+":"+ph.name, sc.distinct
		}
		got[n][0], got[n][1] = p.run(ctx)
		b.progress.Done()
	}
	t.addRound(got[0][0], got[1][1], got[2][0], got[2][1])
}

// mixedPhase is one timed phase of a mixed round: waiters per instance on
// hotKey and workers per instance on distinct keys under distinctPrefix
// (either may be 0), for duration.
type mixedPhase struct {
	insts                     []contender // one per instance, the same contender
	hotKey, distinctPrefix    string
	waiters, workers          int
	hold, duration, opTimeout time.Duration
}

// run runs the phase and returns what the hot waiters and the distinct
// workers did, each with the time until its last worker was done. Heap
// allocations are not counted: the two kinds of traffic share the process.
func (p mixedPhase) run(ctx context.Context) (hot, distinct sample) {
	round, cancel := context.WithTimeout(ctx, p.duration)
	defer cancel()
	start := time.Now()
	n := len(p.insts)
	hotDone := startGroup(n*p.waiters, start, func(w int, l *workerLog) {
		hotLoop(ctx, round, p.insts[w%n], p.hotKey, p.hold, p.opTimeout, l)
	})
	distinctDone := startGroup(n*p.workers, start, func(w int, l *workerLog) {
		distinctLoop(ctx, round, p.insts[w%n], p.distinctPrefix+":"+strconv.Itoa(w), p.opTimeout, l)
	})
	return <-hotDone, <-distinctDone
}

// startGroup starts n workers, worker w running work(w, its log), and
// returns a channel that yields their merged sample once every one of them
// is done, timed from start.
func startGroup(n int, start time.Time, work func(w int, l *workerLog)) <-chan sample {
	logs := newLogs(n, 64)
	var wg sync.WaitGroup
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work(w, &logs[w])
		}()
	}
	done := make(chan sample, 1)
	go func() {
		wg.Wait()
		s := sample{elapsed: time.Since(start)}
		s.merge(logs)
		done <- s
	}()
	return done
}

// distinctLoop is one worker on keys of its own until round (a context
// with a deadline) ends: one try + unlock on a fresh key (prefix:i) per
// pair, logged into l. A try the end of the round interrupts counts as
// nothing; each unlock runs under opTimeout, within ctx.
func distinctLoop(ctx, round context.Context, c contender, prefix string, opTimeout time.Duration, l *workerLog) {
	end, _ := round.Deadline()
	for i := 0; round.Err() == nil; i++ {
		t := time.Now()
		h, err := c.try(round, prefix+":"+strconv.Itoa(i))
		if err != nil {
			if round.Err() != nil || !time.Now().Before(end) {
				return
			}
			l.fail(err)
			continue
		}
		acquired := time.Since(t)
		if err := unlockWithin(ctx, h, opTimeout); err != nil {
			l.fail(err)
			continue
		}
		l.success(acquired, time.Since(t))
	}
}
