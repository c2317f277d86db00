package main

import (
	"context"
	"errors"
	mrand "math/rand/v2"
	"runtime"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/internal/wait"
)

// sample is what one contender did in one measured run: successful pairs
// (acquisitions, in a contended run) with their latencies, and the errors
// apart. Latencies and throughput count successful pairs only.
type sample struct {
	ok        int
	errors    int
	firstErr  error
	elapsed   time.Duration
	acquire   []time.Duration // time to acquire (in a contended run: the wait)
	pair      []time.Duration // acquire + hold + unlock
	perWorker []int           // successful pairs per worker
	mallocs   uint64          // heap allocations during the run, process-wide
}

// throughput is successful pairs per second.
func (s sample) throughput() float64 {
	if s.elapsed <= 0 {
		return 0
	}
	return float64(s.ok) / s.elapsed.Seconds()
}

// workerLog is one worker's share of a sample; each worker writes only
// its own.
type workerLog struct {
	acquire, pair []time.Duration
	ok, errors    int
	first         error
}

// fail counts an error, keeping the first.
func (l *workerLog) fail(err error) {
	l.errors++
	if l.first == nil {
		l.first = err
	}
}

// success records one successful pair.
func (l *workerLog) success(acquire, pair time.Duration) {
	l.ok++
	l.acquire = append(l.acquire, acquire)
	l.pair = append(l.pair, pair)
}

// merge folds the workers' logs into s.
func (s *sample) merge(logs []workerLog) {
	firsts := make([]error, 0, len(logs))
	for _, l := range logs {
		s.ok += l.ok
		s.errors += l.errors
		s.acquire = append(s.acquire, l.acquire...)
		s.pair = append(s.pair, l.pair...)
		s.perWorker = append(s.perWorker, l.ok)
		if l.first != nil {
			firsts = append(firsts, l.first)
		}
	}
	if len(firsts) > 0 {
		s.firstErr = firsts[0]
	}
}

// newLogs returns one log per worker with room for perWorker pairs.
func newLogs(workers, perWorker int) []workerLog {
	logs := make([]workerLog, workers)
	for w := range logs {
		logs[w].acquire = make([]time.Duration, 0, perWorker)
		logs[w].pair = make([]time.Duration, 0, perWorker)
	}
	return logs
}

// mallocs reads the process's count of heap allocations so far. It stops
// the world briefly: call it only outside the timed part.
func mallocs() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.Mallocs
}

// measureSolo does one uncontended lock+unlock pair (try, then unlock) on
// each of keys, spread over workers goroutines. With opTimeout > 0 each
// pair runs under its own deadline; with budget > 0 no pair starts once
// budget has passed. It returns when every worker is done.
func measureSolo(ctx context.Context, c contender, keys []string, workers int, opTimeout, budget time.Duration) sample {
	logs := newLogs(workers, len(keys)/workers+1)
	var wg sync.WaitGroup
	m0 := mallocs()
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := &logs[w]
			for i := w; i < len(keys); i += workers {
				if ctx.Err() != nil || (budget > 0 && time.Since(start) > budget) {
					return
				}
				onePair(ctx, c, keys[i], opTimeout, l)
			}
		}()
	}
	wg.Wait()
	s := sample{elapsed: time.Since(start)}
	s.mallocs = mallocs() - m0
	s.merge(logs)
	return s
}

// onePair does one try+unlock on key and logs it.
func onePair(ctx context.Context, c contender, key string, opTimeout time.Duration, l *workerLog) {
	if opTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opTimeout)
		defer cancel()
	}
	t := time.Now()
	h, err := c.try(ctx, key)
	if err != nil {
		l.fail(err)
		return
	}
	acquired := time.Since(t)
	if err := h.Unlock(ctx); err != nil {
		l.fail(err)
		return
	}
	l.success(acquired, time.Since(t))
}

// measureHot has workers goroutines contend for key for duration: each
// loops acquire (waiting, with the contender's own retries), hold, unlock
// (see waitLoop).
func measureHot(ctx context.Context, c contender, key string, workers int, hold, duration, opTimeout time.Duration) sample {
	return measureTimed(ctx, workers, duration, func(round context.Context, _ int, l *workerLog) {
		hotLoop(ctx, round, c, key, hold, opTimeout, l)
	})
}

// measureTimed runs workers goroutines for duration, worker w running
// loop(round, w, its log) with round a context that ends with the
// duration, and returns their merged sample once every one is done.
func measureTimed(ctx context.Context, workers int, duration time.Duration, loop func(round context.Context, w int, l *workerLog)) sample {
	end := time.Now().Add(duration)
	round, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	logs := newLogs(workers, 64)
	var wg sync.WaitGroup
	m0 := mallocs()
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			loop(round, w, &logs[w])
		}()
	}
	wg.Wait()
	s := sample{elapsed: time.Since(start)}
	s.mallocs = mallocs() - m0
	s.merge(logs)
	return s
}

// hotLoop is one waiter on a hot key until round ends (see waitLoop).
func hotLoop(ctx, round context.Context, c contender, key string, hold, opTimeout time.Duration, l *workerLog) {
	waitLoop(ctx, round, func(round context.Context) (held, error) { return c.wait(round, key) }, hold, opTimeout, l)
}

// waitLoop is one waiter until round (a context with a deadline) ends:
// acquire (waiting, with the contender's own retries), hold, unlock,
// logging each acquisition into l. A wait the end of the round interrupts
// counts as nothing; a wait that fails before it counts as an error. Each
// unlock runs under opTimeout, within ctx.
func waitLoop(ctx, round context.Context, acquire func(round context.Context) (held, error), hold, opTimeout time.Duration, l *workerLog) {
	end, _ := round.Deadline()
	for round.Err() == nil {
		t := time.Now()
		h, err := acquire(round)
		if err != nil {
			// A request cut by the round's deadline can fail (an i/o
			// timeout) a moment before the context reports that it ended.
			if round.Err() != nil || !time.Now().Before(end) {
				return
			}
			l.fail(err)
			continue
		}
		waited := time.Since(t)
		if hold > 0 {
			time.Sleep(hold)
		}
		if err := unlockWithin(ctx, h, opTimeout); err != nil {
			l.fail(err)
			continue
		}
		l.success(waited, time.Since(t))
	}
}

// multiLoad is one contender's round of a multi scenario: workers take
// leases of keys keys each, picked at random out of pool, for duration.
type multiLoad struct {
	pool                []string
	keys, workers       int
	duration, opTimeout time.Duration
	// seed and round seed every worker's picks: in one round every
	// contender's worker w is offered the same key sets, in the same order.
	seed  uint64
	round int
}

// measureMulti has the load's workers loop for its duration: pick keys,
// acquire them all (c.multi, waiting), unlock them all (see waitLoop).
func measureMulti(ctx context.Context, c contender, m multiLoad) sample {
	return measureTimed(ctx, m.workers, m.duration, func(round context.Context, w int, l *workerLog) {
		pick := newPicker(m.pool, m.keys, m.seed, m.round, w)
		waitLoop(ctx, round, func(round context.Context) (held, error) { return c.multi(round, pick.next()) }, 0, m.opTimeout, l)
	})
}

// picker picks k distinct keys at random out of a pool, from a seed.
type picker struct {
	pool []string
	idx  []int    // a permutation of the pool's indices
	keys []string // the last pick; reused
	rng  *mrand.Rand
}

// newPicker returns the picker of worker w in round round: the same seed,
// round and worker, the same picks.
func newPicker(pool []string, k int, seed uint64, round, w int) *picker {
	p := &picker{pool: pool, idx: make([]int, len(pool)), keys: make([]string, k),
		rng: mrand.New(mrand.NewPCG(seed, uint64(round)<<32|uint64(w)))}
	for i := range p.idx {
		p.idx[i] = i
	}
	return p
}

// next returns k distinct keys of the pool, in random order (a partial
// Fisher-Yates shuffle). The slice is reused by the next call.
func (p *picker) next() []string {
	for i := range p.keys {
		j := i + p.rng.IntN(len(p.idx)-i)
		p.idx[i], p.idx[j] = p.idx[j], p.idx[i]
		p.keys[i] = p.pool[p.idx[i]]
	}
	return p.keys
}

// unlockWithin releases h under a deadline of d from now. It uses ctx, not
// the round's context: a lease acquired just before the round ended is
// still released.
func unlockWithin(ctx context.Context, h held, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return h.Unlock(ctx)
}

// warm runs lock+unlock pairs of c on key until one succeeds, retrying
// every 100ms within limit. It opens connections and loads scripts; and a
// node given by -addrs that started less than one TTL ago counts toward no
// majority yet (quorumlock's restart guard), which it waits out.
func warm(ctx context.Context, c contender, key string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		h, err := c.try(ctx, key)
		if err == nil {
			err = h.Unlock(ctx)
		}
		if err == nil {
			return nil
		}
		if werr := wait.Sleep(ctx, 100*time.Millisecond); werr != nil {
			return errors.Join(err, werr)
		}
	}
}
