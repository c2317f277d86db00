package main

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/lease"
)

// rwTally is one contender's figures over the rounds of an rw scenario.
type rwTally struct {
	name          string
	reads, writes *tally
	// shares is, per round, the min share of the workers' operations
	// (reads and writes together).
	shares []float64
	// overlaps counts the holds that broke the lock's promise: a writer
	// beside another writer or a reader, as the workers count themselves
	// in and out.
	overlaps               int
	maxReaders, maxWriters []int // per round, the most holding at once
}

// rwContenders returns the contenders of the rw scenarios that run:
// quorumlock's and etcdlock's RWLock.
func (b *bench) rwContenders() []primContender {
	var cs []primContender
	for _, name := range []string{nameQuorum, nameEtcd} {
		if p := primitivesOf(b.direct, name); p != nil {
			cs = append(cs, primContender{name: name, rw: p.RWLock})
		}
	}
	return cs
}

// runRW runs an rw scenario on the direct clients, rounds interleaving the
// contenders: each round of each contender is one lock of its own (a fresh
// name) for -hot-duration.
func (b *bench) runRW(ctx context.Context, sc scenario) *scenarioRun {
	cs := b.rwContenders()
	r := &scenarioRun{sc: sc}
	for _, c := range cs {
		r.rw = append(r.rw, &rwTally{name: c.name, reads: &tally{name: c.name}, writes: &tally{name: c.name}})
	}
	for round := range b.cfg.rounds {
		for k := range cs {
			if ctx.Err() != nil {
				return r
			}
			i := (round + k) % len(cs)
			b.progress.Start(fmt.Sprintf("%s r%d %s", sc.name, round+1, cs[i].name))
			name := fmt.Sprintf("lockbench:%s:%s:%s:%d", b.runID, sc.name, cs[i].name, round)
			t := r.rw[i]
			lock, err := cs[i].rw(name)
			if err != nil {
				t.writes.add(sample{errors: 1, firstErr: err}, false)
			} else {
				t.add(rwLoad{lock: lock, readPct: sc.readPct, workers: sc.workers, hold: sc.hold, duration: b.cfg.hotDuration,
					opTimeout: b.cfg.opTimeout, seed: b.cfg.seed, round: round}.run(ctx))
			}
			b.progress.Done()
		}
	}
	return r
}

// add folds one round into t.
func (t *rwTally) add(s rwSample) {
	t.reads.add(s.reads, false)
	t.writes.add(s.writes, false)
	ops := make([]int, len(s.reads.perWorker))
	for w := range ops {
		ops[w] = s.reads.perWorker[w] + s.writes.perWorker[w]
	}
	t.shares = append(t.shares, minShare(ops))
	t.overlaps += s.overlaps
	t.maxReaders = append(t.maxReaders, s.maxReaders)
	t.maxWriters = append(t.maxWriters, s.maxWriters)
}

// rwLoad is one contender's round of an rw scenario: workers loop on lock
// for duration, each operation a read with probability readPct/100, else
// a write, held hold.
type rwLoad struct {
	lock                      lease.RWLock
	readPct, workers          int
	hold, duration, opTimeout time.Duration
	// seed and round seed every worker's choices: in one round every
	// contender's worker w makes the same sequence of reads and writes.
	seed  uint64
	round int
}

// rwSample is what one round of an rw scenario did.
type rwSample struct {
	reads, writes          sample
	overlaps               int
	maxReaders, maxWriters int
}

// rwGuard counts the readers and writers holding at once, and the holds
// that overlap a writer.
type rwGuard struct {
	readers, writers occupancy
	overlaps         atomic.Int64
}

// enter counts a reader or a writer in, and an overlap when a writer holds
// beside anyone. (Each side counts itself in before it looks at the
// other, so of two overlapping holds at least one sees the other.)
func (g *rwGuard) enter(read bool) {
	if read {
		g.readers.enter()
		if g.writers.now.Load() > 0 {
			g.overlaps.Add(1)
		}
		return
	}
	if g.writers.enter() > 1 || g.readers.now.Load() > 0 {
		g.overlaps.Add(1)
	}
}

// leave counts a reader or a writer out.
func (g *rwGuard) leave(read bool) {
	if read {
		g.readers.leave()
	} else {
		g.writers.leave()
	}
}

// run runs the round and returns what it did, the rates timed until the
// last worker was done.
func (m rwLoad) run(ctx context.Context) rwSample {
	round, cancel := context.WithTimeout(ctx, m.duration)
	defer cancel()
	reads, writes := newLogs(m.workers, 64), newLogs(m.workers, 16)
	var (
		g  rwGuard
		wg sync.WaitGroup
	)
	start := time.Now()
	for w := range m.workers {
		wg.Go(func() { m.loop(ctx, round, w, &g, &reads[w], &writes[w]) })
	}
	wg.Wait()
	elapsed := time.Since(start)
	s := rwSample{reads: sample{elapsed: elapsed}, writes: sample{elapsed: elapsed}, overlaps: int(g.overlaps.Load()),
		maxReaders: int(g.readers.most.Load()), maxWriters: int(g.writers.most.Load())}
	s.reads.merge(reads)
	s.writes.merge(writes)
	return s
}

// loop is worker w until round ends: pick read or write, acquire it
// (waiting), hold, release, logging reads into rl and writes into wl. As
// in waitLoop, a wait the end of the round interrupts counts as nothing,
// and each release runs under opTimeout, within ctx.
func (m rwLoad) loop(ctx, round context.Context, w int, g *rwGuard, rl, wl *workerLog) {
	rng := mrand.New(mrand.NewPCG(m.seed, uint64(m.round)<<32|uint64(w)))
	end, _ := round.Deadline()
	for round.Err() == nil {
		read := rng.IntN(100) < m.readPct
		l, acquire := wl, m.lock.Lock
		if read {
			l, acquire = rl, m.lock.RLock
		}
		t := time.Now()
		le, err := acquire(round)
		if err != nil {
			if round.Err() != nil || !time.Now().Before(end) {
				return
			}
			l.fail(err)
			continue
		}
		waited := time.Since(t)
		g.enter(read)
		time.Sleep(m.hold)
		g.leave(read)
		if err := unlockWithin(ctx, le, m.opTimeout); err != nil {
			l.fail(err)
			continue
		}
		l.success(waited, time.Since(t))
	}
}

// describeRW is the subtitle of an rw scenario's table.
func describeRW(sj scenarioJSON, c config) string {
	return fmt.Sprintf("%d workers on one read-write lock, each operation a read with probability %d%% (else a write, from seed %d), "+
		"acquire (waiting) + hold %v + release, %v per round; min share over each worker's reads and writes; "+
		"overlaps: holds that found a writer beside them, or a writer that found anyone (counted in errors too)",
		sj.Workers, *sj.ReadPercent, c.seed, time.Duration(sj.HoldNs), c.hotDuration)
}
