package quorum

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/quorumlock/quorumlock/lease"
)

// Lock acquires key, retrying with a jittered exponential backoff until it
// succeeds, ctx ends, or the retry budget (WithRetry, WithMaxWait) is spent.
// On failure the error matches lease.ErrNotAcquired or lease.ErrQuorumUnavailable (a
// *QuorumError, maybe wrapped), ctx.Err(), the Fencer's error, or lease.ErrClosed.
// It returns within WithMaxWait plus one node timeout (plus the Fencer's
// call), and as soon as ctx ends; a failed attempt is undone in the background.
// The Lease returned is a *Lease.
func (l *Locker) Lock(ctx context.Context, key string) (lease.Lease, error) {
	return held(l.lock(ctx, []string{key}, l.cfg.retry.Attempts, l.cfg.maxWait))
}

// TryLock makes exactly one attempt to acquire key (lease.ErrNotAcquired: it is held).
func (l *Locker) TryLock(ctx context.Context, key string) (lease.Lease, error) {
	return held(l.lock(ctx, []string{key}, 1, 0))
}

// LockMulti acquires every key in one lease, all or nothing, retrying as Lock
// does. Each node sets every key to the token in one script call, or none, so
// no caller holds some keys while waiting for others: leases on overlapping
// key sets cannot deadlock (keys are sorted and deduplicated). The lease has
// one validity and holds while a majority holds every key; all its operations
// act on every key, and each key has its own fence (FenceOf). A lease of any
// Redlock client (redsync too) on one of the keys excludes it, and vice versa.
func (l *Locker) LockMulti(ctx context.Context, keys ...string) (lease.Lease, error) {
	return held(l.lock(ctx, keys, l.cfg.retry.Attempts, l.cfg.maxWait))
}

// TryLockMulti makes exactly one attempt to acquire every key (LockMulti).
func (l *Locker) TryLockMulti(ctx context.Context, keys ...string) (lease.Lease, error) {
	return held(l.lock(ctx, keys, 1, 0))
}

// held returns le as a lease.Lease: nil, not a nil *Lease, when there is none.
func held(le *Lease, err error) (lease.Lease, error) {
	if le == nil {
		return nil, err
	}
	return le, err
}

// acquirer is one Lock call: its attempts, backoff and place in the queues.
type acquirer struct {
	l        *Locker
	tg       target
	attempts int       // the most to make; 0: no count limit
	deadline time.Time // no attempt or backoff past it; zero: no time limit
	start    time.Time
	n        int     // attempts made
	wakeups  int     // waits a release announcement ended
	wt       *waiter // set once the key was found held, or others wait
	// pick, when set, makes an attempt in place of the vote on tg: a
	// semaphore's choice of a free permit. Its waiter then waits for any
	// of tg's keys, not all of them (see waiter.anyOf).
	pick func(ctx context.Context, contended bool) (*Lease, bool, error)
}

// lock makes up to attempts attempts within maxWait (0: no limit).
func (l *Locker) lock(ctx context.Context, keys []string, attempts int, maxWait time.Duration) (*Lease, error) {
	tg, err := newTarget(keys)
	if err != nil {
		return nil, err
	}
	return l.acquire(ctx, &acquirer{l: l, tg: tg, attempts: attempts}, maxWait)
}

// acquire runs a within maxWait (0: no limit) and tells the Observer.
func (l *Locker) acquire(ctx context.Context, a *acquirer, maxWait time.Duration) (*Lease, error) {
	if l.closed.Load() {
		return nil, fmt.Errorf("quorum: lock %q: %w", a.tg.name, lease.ErrClosed)
	}
	a.start = time.Now()
	if maxWait > 0 {
		a.deadline = a.start.Add(maxWait)
	}
	defer func() {
		if o, ok := l.wk.unregister(a.wt); ok {
			o.abandon()
		}
	}()
	le, err := a.run(ctx)
	l.cfg.observer.ObserveAcquire(lease.AcquireEvent{Key: a.tg.name, Attempts: a.n, Wakeups: a.wakeups,
		Duration: time.Since(a.start), Result: resultOf(err), Err: err})
	return le, err
}

func (a *acquirer) run(ctx context.Context) (*Lease, error) {
	if a.attempts != 1 { // queue behind this Locker's waiters, not overtake them
		if a.wt = a.l.wk.join(a.tg.keys, true, a.pick != nil); a.wt != nil && !a.wait(ctx, a.backoff(0)) {
			return nil, a.ctxError(ctx)
		}
	}
	for {
		if ctxErr(ctx) != nil {
			return nil, a.ctxError(ctx)
		}
		le, retryable, err := a.try(ctx)
		switch {
		case err == nil:
			return le, nil
		case ctxErr(ctx) != nil:
			return nil, a.ctxError(ctx)
		case !retryable || (a.attempts > 0 && a.n >= a.attempts) || a.l.closed.Load():
			return nil, a.gaveUp(err)
		}
		if a.wt == nil && errors.Is(err, lease.ErrNotAcquired) {
			a.wt = a.l.wk.join(a.tg.keys, false, a.pick != nil) // be told when it is released
		}
		if !a.pause(ctx) {
			return nil, a.gaveUp(err)
		}
	}
}

// try takes the lease handed over to the waiter, if any, or makes an attempt.
func (a *acquirer) try(ctx context.Context) (*Lease, bool, error) {
	if a.wt != nil {
		select {
		case o := <-a.wt.offers:
			a.n++ // the hand-over counts as an attempt, and succeeds unless it came too late
			return a.l.accept(ctx, o)
		default:
		}
	}
	a.n++
	a.l.wk.attempting(a.wt)
	if a.pick != nil {
		return a.pick(ctx, a.wt != nil)
	}
	return a.l.attempt(ctx, a.tg, a.wt != nil)
}

// pause waits out the backoff after a failed attempt, and reports whether
// to try again (a dead ctx ends the loop at its top). A backoff past the
// wait budget ends the call, unless a release message comes before then.
func (a *acquirer) pause(ctx context.Context) bool {
	d := a.backoff(a.n - 1)
	last := !a.deadline.IsZero() && time.Now().Add(d).After(a.deadline)
	if last && (a.wt == nil || !time.Now().Before(a.deadline)) {
		return false
	}
	before := a.wakeups
	return !a.wait(ctx, d) || !last || a.wakeups > before
}

func (a *acquirer) backoff(retry int) time.Duration {
	r := a.l.cfg.retry
	return backoffDelay(retry, r.BaseDelay, r.MaxDelay, mrand.Int64N)
}

// wait waits up to d, cut at the deadline, for a release of the keys (or
// sleeps, without a waiter), and reports whether ctx is still live. A waiter
// behind others waits more backoffs, up to the deadline: only the oldest polls.
func (a *acquirer) wait(ctx context.Context, d time.Duration) bool {
	var wake chan struct{}
	if a.wt != nil {
		wake = a.wt.wake
	}
	for retry := 0; ; retry++ {
		if !a.deadline.IsZero() {
			d = min(d, time.Until(a.deadline))
		}
		select {
		case <-ctx.Done():
			return false
		case <-wake: // a nil wake (no waiter) never receives
			a.wakeups++
			return true
		case <-time.After(d):
		}
		if a.wt == nil || a.l.wk.due(a.wt) || (!a.deadline.IsZero() && !time.Now().Before(a.deadline)) {
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

func resultOf(err error) lease.Result {
	switch {
	case err == nil:
		return lease.ResultAcquired
	case errors.Is(err, lease.ErrNotAcquired):
		return lease.ResultNotAcquired
	case errors.Is(err, lease.ErrQuorumUnavailable):
		return lease.ResultUnavailable
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return lease.ResultCanceled
	}
	return lease.ResultError
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
func (l *Locker) attempt(ctx context.Context, tg target, contended bool) (le *Lease, retryable bool, err error) {
	token := rand.Text()
	var btoken any = token // boxed once for every request of the lease
	start := time.Now()    // before the first request leaves
	c := l.send(ctx, request{op: OpAcquire, script: acquireScript, key: tg.name, keys: tg.keys, args: l.acquireArgs(tg, btoken),
		fast: contended, deadline: start.Add(l.cfg.nodeTimeout)})
	t := l.collect(c, stopDecided, newTally(len(l.nodes)))
	reason, sentinel := "", t.cause()
	if t.verdict() == won {
		if until := l.cfg.leaseEnd(start, l.cfg.ttl); time.Now().Before(until) {
			// Armed once handed out (after the Fencer): unused, it reports no loss.
			le = &Lease{l: l, target: tg, token: token, btoken: btoken, start: start, until: until,
				acqDeadline: c.req.deadline, fast: contended, lost: make(chan struct{}), moved: make(chan struct{}, 1)}
			if l.cfg.fencer != nil && tg.fenced() > 0 {
				return l.fence(ctx, le, c)
			}
			le.arm()
			return le, true, nil
		}
		reason = fmt.Sprintf("the vote took %v and left no validity", time.Since(start).Round(time.Microsecond))
		sentinel = lease.ErrQuorumUnavailable
	}
	c.undo(tg.boxed, btoken)
	return nil, true, l.quorumError(OpAcquire, tg.name, t, reason, sentinel)
}

// acquireArgs builds the acquire script's EVALSHA (see acquire.lua), in
// one allocation: EVALSHA sha numkeys, the keys (and the marker), then
// token, TTL (and window, durable) (and the number of lock keys).
func (l *Locker) acquireArgs(tg target, btoken any) []any {
	n, numkeys := len(tg.boxed), len(tg.boxed)
	if l.cfg.guard {
		numkeys++
	}
	args := append(make([]any, 0, 3+numkeys+5), "evalsha", acquireScript.bsha, numkeys)
	args = append(args, tg.boxed...)
	if l.cfg.guard {
		args = append(args, BootMarkerKey)
	}
	args = append(args, btoken, l.ttlArg)
	switch {
	case l.cfg.guard:
		args = append(args, l.windowArg, l.durableArg)
	case n > 1:
		args = append(args, 0, 0)
	}
	if n > 1 {
		args = append(args, n)
	}
	return args
}

// fence asks the Fencer for each key's fence, in order, within the validity.
// Either failure releases the lease; only running out of validity is retried.
func (l *Locker) fence(ctx context.Context, le *Lease, c *call) (*Lease, bool, error) {
	fctx, cancel := context.WithDeadline(ctx, le.until)
	fences := make([]int64, len(le.keys))
	var err error
	for i := 0; i < le.fenced() && err == nil; i++ {
		fences[i], err = l.cfg.fencer.Next(fctx, le.keys[i])
	}
	cancel()
	if err == nil && time.Now().Before(le.until) {
		le.fences = fences
		le.arm()
		return le, true, nil
	}
	le.end(nil, 0)
	c.undo(le.boxed, le.btoken)
	if err != nil && (ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded)) {
		return nil, false, fmt.Errorf("quorum: lock %q: fence: %w", le.name, err)
	}
	t := tally{n: len(l.nodes), quorum: l.quorum, ok: l.quorum}
	return nil, true, l.quorumError(OpAcquire, le.name, t, "the fencer answered after the validity ran out", lease.ErrQuorumUnavailable)
}
