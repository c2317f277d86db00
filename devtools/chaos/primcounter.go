package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/devtools/countersem"
	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/internal/wait"
	"github.com/quorumlock/quorumlock/lease"
)

// primLoop runs the primitive workload cfg.Prim until cfg.Rounds are done,
// ctx ends or the gate's reader ends it.
func (w *worker) primLoop(ctx context.Context, g *gate) error {
	round, closeFn, err := w.primRound()
	if err != nil {
		return err
	}
	defer closeFn()
	for n := 0; n < w.cfg.Rounds && ctx.Err() == nil; n++ {
		if !g.wait(ctx) {
			break
		}
		round(ctx, n)
	}
	return w.err
}

// primRound builds the primitive of the workload and returns its round.
func (w *worker) primRound() (func(context.Context, int), func(), error) {
	if w.cfg.Prim == PrimCounter {
		return w.counterRound()
	}
	p, ok := w.locker.(lease.Primitives)
	if !ok {
		return nil, nil, fmt.Errorf("the %s locker has no primitives", w.cfg.Lock)
	}
	nop := func() {}
	switch w.cfg.Prim {
	case PrimSemaphore:
		sem, err := p.Semaphore(primName, SemPermits)
		return func(ctx context.Context, n int) { w.semRound(ctx, n, sem) }, nop, err
	case PrimRWLock:
		rw, err := p.RWLock(primName)
		return func(ctx context.Context, n int) { w.rwRound(ctx, n, rw) }, nop, err
	case PrimElection:
		el, err := p.Election(primName)
		return func(ctx context.Context, n int) { w.electRound(ctx, n, el) }, nop, err
	}
	return nil, nil, fmt.Errorf("unknown workload %q", w.cfg.Prim)
}

// counterRound builds the per-node counter semaphore on clients of the
// worker's own, each request to a node sent after a random 0 to 2ms (as
// nodes on other machines would see racing acquirers in varied orders),
// and returns its round.
func (w *worker) counterRound() (func(context.Context, int), func(), error) {
	nodes := make([]redis.Cmdable, len(w.cfg.Redis))
	clients := make([]*redis.Client, len(w.cfg.Redis))
	for i, a := range w.cfg.Redis {
		clients[i] = redis.NewClient(testbed.ClientOptions(a))
		nodes[i] = clients[i]
	}
	closeFn := func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}
	rng := rand.New(rand.NewPCG(w.cfg.Seed, uint64(w.cfg.ID)+0xc0))
	sem, err := countersem.New(nodes, primName, SemPermits, countersem.WithTTL(w.cfg.TTL), countersem.WithNodeTimeout(w.cfg.nodeTimeout()),
		countersem.WithSendDelay(func(int) time.Duration { return time.Duration(rng.Int64N(int64(2 * time.Millisecond))) }))
	if err != nil {
		closeFn()
		return nil, nil, err
	}
	return func(ctx context.Context, n int) { w.counterPass(ctx, n, sem) }, closeFn, nil
}

// counterPass is one pass of the counter semaphore's loop. Every worker
// starts its attempt at the same instants of the shared wall clock (every
// 4 Hold), so the attempts race as countersem's own test makes them: one
// attempt, then, if it held, enter the resource with the permit's token,
// hold, exit, release.
func (w *worker) counterPass(ctx context.Context, n int, sem *countersem.Semaphore) {
	period := 4 * w.cfg.Hold
	now := time.Now()
	if wait.Sleep(ctx, now.Truncate(period).Add(period).Sub(now)) != nil {
		return
	}
	w.emit(Event{Round: n, Op: OpLock, Phase: PhaseCall})
	p, err := sem.TryAcquire(ctx)
	if err != nil {
		if errors.Is(err, lease.ErrNotAcquired) {
			err = nil
		}
		w.emit(Event{Round: n, Op: OpLock, Phase: PhaseReturn, Result: map[bool]string{true: "not-acquired", false: ResultError}[err == nil]})
		return
	}
	key := p.Token()
	w.emit(Event{Round: n, Op: OpLock, Phase: PhaseReturn, Result: ResultOK, Keys: []string{key}, Fences: []int64{0},
		Until: time.Now().Add(time.Until(p.Until())).UnixNano()})
	db, cancel := dbCtx(ctx)
	defer cancel()
	h := w.holder(n)
	if w.step(Event{Round: n, Op: OpRead, Key: key}, func() error {
		return w.apply(db, resourceOp{kind: logEnter, holder: h, slot: key, claim: true})
	}) == nil {
		_ = wait.Sleep(ctx, w.cfg.Hold)
		_ = w.step(Event{Round: n, Op: OpWrite, Key: key}, func() error {
			return w.apply(db, resourceOp{kind: logExit, holder: h, slot: key})
		})
	}
	w.emit(Event{Round: n, Op: OpUnlock, Phase: PhaseCall, Keys: []string{key}, Fences: []int64{0}})
	rctx, cancelRel := context.WithTimeout(context.WithoutCancel(ctx), 2*w.cfg.TTL)
	err = p.Release(rctx)
	cancelRel()
	r, msg := result(err)
	w.emit(Event{Round: n, Op: OpUnlock, Phase: PhaseReturn, Result: r, Err: msg, Keys: []string{key}, Fences: []int64{0}})
}
