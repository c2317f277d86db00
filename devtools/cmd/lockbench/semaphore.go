package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/devtools/countersem"
)

// semTally is one contender's figures over the rounds of a semaphore
// scenario: the tally of its acquisitions (the wait, the fairness), and
// the holders it let in at once.
type semTally struct {
	*tally
	unsafe bool
	// maxHolders is, per round, the most workers that held a permit at
	// once (counted in once acquired, out before the release).
	maxHolders []int
	// overPermits counts the acquisitions that found every permit held
	// by others already: each one a holder too many.
	overPermits int
}

// semContenders returns the contenders of the semaphore scenarios that
// run, in the order they are reported: quorumlock's Semaphore, etcdlock's,
// the per-node counter semaphore over the same Redis masters, and a
// sorted-set semaphore on the first master only.
func (b *bench) semContenders() []primContender {
	var cs []primContender
	for _, name := range []string{nameQuorum, nameEtcd} {
		if p := primitivesOf(b.direct, name); p != nil {
			cs = append(cs, primContender{name: name, sem: lockerSemaphore(p)})
		}
	}
	nodes := b.direct.conns.redis
	if b.cfg.wants(nameCounterSem) {
		cs = append(cs, primContender{name: nameCounterSem, unsafe: true, sem: b.counterSemaphore(nodes)})
	}
	if b.cfg.wants(nameSingle) {
		cs = append(cs, primContender{name: nameSingle, sem: func(name string, permits int) (func(context.Context) (held, error), error) {
			s := newSingleSem(nodes[0], name, permits, b.cfg.ttl)
			return func(ctx context.Context) (held, error) { return s.acquire(ctx, contendedMaxWait) }, nil
		}})
	}
	return cs
}

// counterSemaphore is the per-node counter semaphore (devtools/countersem,
// the unsafe scheme) over nodes: the Redis contenders' TTL and node
// timeout, their contended wait, and a fixed retry delay of the others'
// first backoff cap (singleBaseDelay).
func (b *bench) counterSemaphore(nodes []redis.UniversalClient) func(string, int) (func(context.Context) (held, error), error) {
	cmds := make([]redis.Cmdable, len(nodes))
	for i, c := range nodes {
		cmds[i] = c
	}
	opts := []countersem.Option{countersem.WithTTL(b.cfg.ttl), countersem.WithMaxWait(contendedMaxWait), countersem.WithRetryDelay(singleBaseDelay)}
	if b.cfg.timeout > 0 {
		opts = append(opts, countersem.WithNodeTimeout(b.cfg.timeout))
	}
	return func(name string, permits int) (func(context.Context) (held, error), error) {
		s, err := countersem.New(cmds, name, permits, opts...)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) (held, error) {
			p, err := s.Acquire(ctx)
			if err != nil {
				return nil, err
			}
			return permitHeld{p}, nil
		}, nil
	}
}

// permitHeld is a permit of the counter semaphore.
type permitHeld struct{ p *countersem.Permit }

// Unlock releases the permit.
func (h permitHeld) Unlock(ctx context.Context) error { return h.p.Release(ctx) }

// runSemaphore runs a semaphore scenario on the direct clients, rounds
// interleaving the contenders: each round of each contender is one
// semaphore of its own (a fresh name) for -hot-duration.
func (b *bench) runSemaphore(ctx context.Context, sc scenario) *scenarioRun {
	cs := b.semContenders()
	r := &scenarioRun{sc: sc}
	for _, c := range cs {
		r.sem = append(r.sem, &semTally{tally: &tally{name: c.name}, unsafe: c.unsafe})
	}
	for round := range b.cfg.rounds {
		for k := range cs {
			if ctx.Err() != nil {
				return r
			}
			i := (round + k) % len(cs)
			b.progress.Start(fmt.Sprintf("%s r%d %s", sc.name, round+1, cs[i].name))
			name := fmt.Sprintf("lockbench:%s:%s:%s:%d", b.runID, sc.name, cs[i].name, round)
			b.semRound(ctx, sc, cs[i], name, r.sem[i])
			b.progress.Done()
		}
	}
	return r
}

// semRound measures contender c on the semaphore name for one round, into t.
func (b *bench) semRound(ctx context.Context, sc scenario, c primContender, name string, t *semTally) {
	acquire, err := c.sem(name, sc.permits)
	if err != nil {
		t.add(sample{errors: 1, firstErr: err}, true)
		t.maxHolders = append(t.maxHolders, 0)
		return
	}
	var (
		o    occupancy
		over atomic.Int64
	)
	s := measureTimed(ctx, sc.workers, b.cfg.hotDuration, func(round context.Context, _ int, l *workerLog) {
		waitLoop(ctx, round, func(round context.Context) (held, error) {
			h, err := acquire(round)
			if err != nil {
				return nil, err
			}
			if o.enter() > int64(sc.permits) {
				over.Add(1)
			}
			return &counted{h: h, o: &o}, nil
		}, sc.hold, b.cfg.opTimeout, l)
	})
	t.add(s, true)
	t.maxHolders = append(t.maxHolders, int(o.most.Load()))
	t.overPermits += int(over.Load())
}

// describeSemaphore is the subtitle of a semaphore scenario's table.
func describeSemaphore(sj scenarioJSON, c config) string {
	return fmt.Sprintf("%d workers share %d permits of one semaphore: acquire (waiting) + hold %v + release, %v per round; "+
		"max holders: the most workers holding a permit at once, as they count themselves in and out (over the rounds); "+
		"over P: acquisitions that found every permit held by others; counter-semaphore is the per-node counter scheme (UNSAFE, a negative control), "+
		"single-node a sorted-set semaphore on the first master only",
		sj.Workers, sj.Permits, time.Duration(sj.HoldNs), c.hotDuration)
}
