package quorum

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"
)

// Lock acquires key, retrying with a jittered exponential backoff until it
// succeeds, ctx ends, or the retry budget (WithRetry, WithMaxWait) is spent.
// On failure the error matches ErrNotAcquired or ErrQuorumUnavailable (a
// *QuorumError, maybe wrapped), ctx.Err(), the Fencer's error, or ErrClosed.
// It returns within WithMaxWait plus one node timeout (plus the Fencer's
// call), and as soon as ctx ends; what a failed attempt took is released in
// the background.
func (l *Locker) Lock(ctx context.Context, key string) (*Lease, error) {
	return l.lock(ctx, []string{key}, l.cfg.retry.Attempts, l.cfg.maxWait)
}

// TryLock makes exactly one attempt to acquire key.
// It fails with ErrNotAcquired when another owner holds the key.
func (l *Locker) TryLock(ctx context.Context, key string) (*Lease, error) {
	return l.lock(ctx, []string{key}, 1, 0)
}

// LockMulti acquires every key in one lease, all or nothing, retrying as
// Lock does. Each node sets every key to the lease's one token in one
// script call, or sets none and votes no, so a failed attempt leaves no key
// behind and no caller ever holds some keys while it waits for others:
// leases whose key sets overlap cannot deadlock, whatever order the keys
// are named in (they are sorted; duplicates count once). The lease has one
// validity, computed as for one key, and holds while a majority of nodes
// hold every key; Extend, Unlock, Do's watchdog and the restart guard act
// on all the keys at once. Each key gets its own fence (Lease.FenceOf).
// A redsync mutex, or another Locker's lease, on any one of the keys
// excludes the lease and is excluded by it.
func (l *Locker) LockMulti(ctx context.Context, keys ...string) (*Lease, error) {
	return l.lock(ctx, keys, l.cfg.retry.Attempts, l.cfg.maxWait)
}

// TryLockMulti makes exactly one attempt to acquire every key (see
// LockMulti).
func (l *Locker) TryLockMulti(ctx context.Context, keys ...string) (*Lease, error) {
	return l.lock(ctx, keys, 1, 0)
}

// acquirer is one Lock call: its attempts, backoff and place among this
// Locker's waiters for the keys.
type acquirer struct {
	l        *Locker
	tg       target
	attempts int       // the most to make; 0: no count limit
	deadline time.Time // no attempt or backoff past it; zero: no time limit
	start    time.Time
	n        int     // attempts made
	wakeups  int     // waits a release announcement ended
	wt       *waiter // set once the key was found held, or others wait
}

// lock makes up to attempts attempts within maxWait (0: no limit).
func (l *Locker) lock(ctx context.Context, keys []string, attempts int, maxWait time.Duration) (*Lease, error) {
	tg, err := newTarget(keys)
	switch {
	case err != nil:
		return nil, err
	case l.isClosed():
		return nil, fmt.Errorf("quorum: lock %q: %w", tg.name, ErrClosed)
	}
	a := &acquirer{l: l, tg: tg, attempts: attempts, start: time.Now()}
	if maxWait > 0 {
		a.deadline = a.start.Add(maxWait)
	}
	defer func() { l.wk.unregister(a.wt) }()
	lease, err := a.run(ctx)
	l.cfg.observer.ObserveAcquire(AcquireEvent{Key: tg.name, Attempts: a.n, Wakeups: a.wakeups,
		Duration: time.Since(a.start), Result: resultOf(err), Err: err})
	return lease, err
}

// run makes the attempts, waiting between them.
func (a *acquirer) run(ctx context.Context) (*Lease, error) {
	if a.attempts != 1 { // queue behind this Locker's waiters, not overtake them
		if a.wt = a.l.wk.join(a.tg.keys, true); a.wt != nil && !a.wait(ctx, a.backoff(0)) {
			return nil, a.ctxError(ctx)
		}
	}
	for {
		if ctxErr(ctx) != nil {
			return nil, a.ctxError(ctx)
		}
		a.n++
		a.l.wk.attempting(a.wt)
		lease, retryable, err := a.l.attempt(ctx, a.tg, a.wt != nil)
		switch {
		case err == nil:
			return lease, nil
		case ctxErr(ctx) != nil:
			return nil, a.ctxError(ctx)
		case !retryable || (a.attempts > 0 && a.n >= a.attempts) || a.l.isClosed():
			return nil, a.gaveUp(err)
		}
		if a.wt == nil && errors.Is(err, ErrNotAcquired) {
			a.wt = a.l.wk.join(a.tg.keys, false) // be told when it is released
		}
		// A dead ctx ends the loop at its top.
		if goOn, live := a.pause(ctx); live && !goOn {
			return nil, a.gaveUp(err)
		}
	}
}

// pause waits out the backoff after a failed attempt, and reports whether
// to try again and whether ctx is still live. A backoff past the wait
// budget ends the call, but a release message before the budget is spent
// still earns one more attempt.
func (a *acquirer) pause(ctx context.Context) (goOn, live bool) {
	d := a.backoff(a.n - 1)
	last := !a.deadline.IsZero() && time.Now().Add(d).After(a.deadline)
	if last {
		if a.wt == nil || !time.Now().Before(a.deadline) {
			return false, true
		}
		d = time.Until(a.deadline)
	}
	if a.wt == nil {
		live, _ := sleep(ctx, d, nil)
		return true, live
	}
	before := a.wakeups
	if !a.wait(ctx, d) {
		return false, false
	}
	return !last || a.wakeups > before, true
}

// backoff is the full-jitter delay before retry number retry.
func (a *acquirer) backoff(retry int) time.Duration {
	r := a.l.cfg.retry
	return backoffDelay(retry, r.BaseDelay, r.MaxDelay, mrand.Int64N)
}

// wait waits up to d for a release of the key, and reports whether ctx is
// still live. A waiter behind others waits another backoff when its own
// ends (up to the deadline), so that only the oldest waiter polls.
func (a *acquirer) wait(ctx context.Context, d time.Duration) bool {
	for retry := 0; ; retry++ {
		if !a.deadline.IsZero() {
			d = min(d, time.Until(a.deadline))
		}
		live, woken := sleep(ctx, d, a.wt.wake)
		if woken {
			a.wakeups++
		}
		if !live || woken || a.l.wk.front(a.wt) {
			return live
		}
		if !a.deadline.IsZero() && !time.Now().Before(a.deadline) {
			return true
		}
		d = a.backoff(retry)
	}
}

// gaveUp is the error of a Lock that stopped after err.
func (a *acquirer) gaveUp(err error) error {
	if a.n > 1 {
		return fmt.Errorf("quorum: lock %q: gave up after %d attempts in %v: %w", a.tg.name, a.n, time.Since(a.start).Round(time.Millisecond), err)
	}
	return err
}

func resultOf(err error) Result {
	switch {
	case err == nil:
		return ResultAcquired
	case errors.Is(err, ErrNotAcquired):
		return ResultNotAcquired
	case errors.Is(err, ErrQuorumUnavailable):
		return ResultUnavailable
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return ResultCanceled
	}
	return ResultError
}

// ctxError wraps the context's error (and its cause when it differs).
func (a *acquirer) ctxError(ctx context.Context) error {
	err := ctxErr(ctx)
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return fmt.Errorf("quorum: lock %q: %w: %w", a.tg.name, err, cause)
	}
	return fmt.Errorf("quorum: lock %q: %w", a.tg.name, err)
}

// attempt makes one acquisition attempt, on the fast lane when other Lock
// calls wait for the keys. retryable is false when the Fencer failed.
func (l *Locker) attempt(ctx context.Context, tg target, contended bool) (lease *Lease, retryable bool, err error) {
	token := rand.Text()
	var btoken any = token // boxed once for every request of the lease
	start := time.Now()    // before the first request leaves
	c := l.send(ctx, request{op: OpAcquire, key: tg.name, keys: tg.keys, args: l.acquireArgs(tg, btoken),
		fast: contended, deadline: start.Add(l.cfg.nodeTimeout)})
	v := l.collect(c, stopDecided, classifyAcquire, newTally(len(l.nodes)))
	reason, sentinel := "", v.t.cause()
	if v.t.verdict() == won {
		if until := l.cfg.leaseEnd(start, l.cfg.ttl); time.Now().Before(until) {
			// Armed once handed out (after the Fencer): a lease never handed
			// out reports no loss.
			lease = &Lease{l: l, target: tg, token: token, btoken: btoken, start: start, until: until,
				acqDeadline: c.req.deadline, fast: contended, lost: make(chan struct{}), moved: make(chan struct{}, 1)}
			if l.cfg.fencer != nil {
				return l.fence(ctx, lease, c)
			}
			lease.arm()
			return lease, true, nil
		}
		reason = fmt.Sprintf("the vote took %v and left no validity", time.Since(start).Round(time.Microsecond))
		sentinel = ErrQuorumUnavailable
	}
	l.undo(ctx, c, tg.boxed, btoken)
	return nil, true, l.quorumError(OpAcquire, tg.name, v.t, v.errs, reason, sentinel)
}

// acquireArgs builds the acquire script's EVALSHA (see acquire.lua): the
// keys, then the restart marker when the guard is on.
func (l *Locker) acquireArgs(tg target, btoken any) []any {
	keys, argv := tg.boxed, []any{btoken, l.ttlArg}
	if l.cfg.guard {
		keys = append(keys[:len(keys):len(keys)], BootMarkerKey)
		argv = append(argv, l.windowArg, l.durableArg)
	}
	if len(tg.keys) > 1 {
		if !l.cfg.guard {
			argv = append(argv, 0, 0)
		}
		argv = append(argv, len(tg.keys))
	}
	return scripts[OpAcquire].evalsha(keys, argv...)
}

// classifyAcquire reads the acquire script's answer.
func classifyAcquire(val int64) (uint8, error) {
	switch {
	case val == 1:
		return stYes, nil
	case val == 0:
		return stNo, nil
	case val < 0:
		return stFailed, warmingError(val)
	}
	return stFailed, fmt.Errorf("quorum: unexpected acquire answer %d", val)
}

// fence asks the Fencer for the fence of each of the lease's keys, in
// order, within the validity. A failure releases the lease and is not
// retried; running out of validity releases it and may be retried.
func (l *Locker) fence(ctx context.Context, lease *Lease, c *call) (*Lease, bool, error) {
	fctx, cancel := context.WithDeadline(ctx, lease.until)
	fences := make([]int64, len(lease.keys))
	var err error
	for i := 0; i < len(fences) && err == nil; i++ {
		fences[i], err = l.cfg.fencer.Next(fctx, lease.keys[i])
	}
	cancel()
	if err == nil && time.Now().Before(lease.until) {
		lease.fences = fences
		lease.arm()
		return lease, true, nil
	}
	lease.end(stateReleased, nil, 0)
	l.undo(ctx, c, lease.boxed, lease.btoken)
	if err != nil && (ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded)) {
		return nil, false, fmt.Errorf("quorum: lock %q: fence: %w", lease.name, err)
	}
	t := newTally(len(l.nodes))
	t.ok = l.quorum
	return nil, true, l.quorumError(OpAcquire, lease.name, t, nil, "the fencer answered after the validity ran out", ErrQuorumUnavailable)
}
