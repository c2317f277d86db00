package quorum

import (
	"context"
	"fmt"
	"sync"
	"time"
)

type leaseState uint8

const (
	stateHeld leaseState = iota
	stateLost
	stateReleased
)

// Lease is a held lock: the right to act on its key until Until, provided
// the timing assumptions of the package hold (see the package
// documentation). Its methods are safe for concurrent use.
type Lease struct {
	l     *Locker
	key   string
	token string
	fence int64
	start time.Time // when the acquiring vote started
	wg    *sync.WaitGroup

	acqDone     <-chan struct{} // closed when every acquire request returned
	acqDeadline time.Time

	extendMu sync.Mutex // one extension at a time
	unlockMu sync.Mutex // one release at a time

	mu        sync.Mutex
	until     time.Time
	state     leaseState
	err       error // why the lease ended (nil while held)
	lost      chan struct{}
	timer     *time.Timer
	confirmed []bool // nodes whose release was confirmed
	released  int    // nodes where the release deleted the key
}

func newLease(l *Locker, key, token string, start, until time.Time, c *call, wg *sync.WaitGroup) *Lease {
	le := &Lease{
		l: l, key: key, token: token, start: start, wg: wg,
		acqDone: c.done, acqDeadline: start.Add(l.cfg.nodeTimeout),
		until: until, lost: make(chan struct{}),
	}
	le.mu.Lock() // expire may run at once; it must see the timer
	le.timer = time.AfterFunc(time.Until(until), le.expire)
	le.mu.Unlock()
	return le
}

// Key returns the locked key.
func (le *Lease) Key() string { return le.key }

// Token returns the lease's random token: the value of the key on the nodes
// that granted it (at least 128 random bits).
func (le *Lease) Token() string { return le.token }

// Fence returns the fence token from the configured Fencer, or 0 when no
// Fencer is set. Pass it to the protected resource with every write.
func (le *Lease) Fence() int64 { return le.fence }

// Until returns the end of the lease's validity: the TTL minus the time the
// vote (or the last extension) took, minus the drift allowance. It carries a
// monotonic clock reading, so compare it with time.Now, not a wall clock.
func (le *Lease) Until() time.Time {
	le.mu.Lock()
	defer le.mu.Unlock()
	return le.until
}

// Lost returns a channel that is closed when the lease ends: its validity ran
// out, an extension failed, or Unlock was called. Err tells which.
func (le *Lease) Lost() <-chan struct{} { return le.lost }

// Err returns nil while the lease is held. After Lost is closed it returns
// an error matching ErrLeaseLost when the lease was lost, or ErrReleased when
// Unlock released it.
func (le *Lease) Err() error {
	le.mu.Lock()
	defer le.mu.Unlock()
	return le.err
}

// endLocked moves a held lease to state with err; le.mu must be held. It
// returns false when the lease had already ended. The caller that gets true
// closes le.lost once it has released le.mu (after telling the Observer, so
// that whoever wakes up on Lost finds the event recorded).
func (le *Lease) endLocked(state leaseState, err error) bool {
	if le.state != stateHeld {
		return false
	}
	le.state, le.err = state, err
	le.timer.Stop()
	return true
}

// stop ends the lease without a release (used when an acquisition is undone).
func (le *Lease) stop() {
	le.mu.Lock()
	ended := le.endLocked(stateReleased, fmt.Errorf("quorum: %q: %w", le.key, ErrReleased))
	le.mu.Unlock()
	if ended {
		close(le.lost)
	}
}

// expire runs when the validity timer fires.
func (le *Lease) expire() {
	le.mu.Lock()
	if le.state != stateHeld {
		le.mu.Unlock()
		return
	}
	if d := time.Until(le.until); d > 0 { // extended meanwhile
		le.timer.Reset(d)
		le.mu.Unlock()
		return
	}
	ended := le.endLocked(stateLost, fmt.Errorf("quorum: %q: %w: validity ran out", le.key, ErrLeaseLost))
	le.mu.Unlock()
	if ended {
		le.l.cfg.observer.ObserveLost(LostEvent{Key: le.key, Reason: LostExpired, Held: time.Since(le.start)})
		close(le.lost)
	}
}

// Extend sets the key's TTL to ttl on every node that still holds the token
// (compare-and-pexpire). It succeeds only when a majority confirms before
// the current validity ends; Until then becomes the start of the extension
// plus ttl minus the time it took and the drift allowance.
//
// When the extension fails, the lease is lost: Lost is closed and the error
// matches ErrLeaseLost (and is a *QuorumError listing the failed nodes). An
// Extend on a lease that already ended returns an error matching
// ErrLeaseLost. When ctx ends first, the error wraps ctx.Err() and the lease
// keeps its current validity. With the amnesia guard on, ttl may not exceed
// the amnesia window.
func (le *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	l := le.l
	if err := l.checkTTL(ttl); err != nil {
		return fmt.Errorf("quorum: extend %q: %w", le.key, err)
	}
	ttl = ttl.Truncate(time.Millisecond)
	le.extendMu.Lock()
	defer le.extendMu.Unlock()

	le.mu.Lock()
	state, until := le.state, le.until
	le.mu.Unlock()
	if state != stateHeld {
		return le.endedError()
	}
	start := time.Now()
	if !start.Before(until) {
		le.expire()
		return le.endedError()
	}

	deadline := start.Add(l.cfg.nodeTimeout)
	if until.Before(deadline) {
		deadline = until
	}
	c := l.fanOut(ctx, OpExtend, deadline, l.extendScript, []string{le.key}, []any{le.token, ttl.Milliseconds()}, nil, le.wg)
	n := len(l.nodes)
	t := newTally(n)
	answered := make([]bool, n)
	var nodeErrs []NodeError
	for t.verdict() == undecided && t.answered() < n {
		r, ok := c.next()
		if !ok {
			err := c.timeoutError()
			if c.parent.Err() == nil && !time.Now().Before(until) {
				err = fmt.Errorf("%w: no answer before the validity ran out", ErrNodeTimeout)
			}
			for i, a := range answered {
				if !a {
					answered[i] = true
					t.failed++
					nodeErrs = append(nodeErrs, l.nodeError(i, err))
				}
			}
			break
		}
		answered[r.node] = true
		switch {
		case r.err != nil:
			t.failed++
			nodeErrs = append(nodeErrs, l.nodeError(r.node, r.err))
		case r.val == 1:
			t.ok++
		default:
			t.held++
		}
	}
	elapsed := time.Since(start)
	ev := ExtendEvent{Key: le.key, Duration: elapsed, Confirmed: t.ok}
	var reason string
	if t.verdict() == won {
		v := validity(ttl, elapsed, l.cfg.drift)
		le.mu.Lock()
		state := le.state
		if v > 0 && state == stateHeld && time.Now().Before(le.until) {
			le.until = start.Add(v)
			le.timer.Reset(time.Until(le.until))
			le.mu.Unlock()
			l.cfg.observer.ObserveExtend(ev)
			return nil
		}
		le.mu.Unlock()
		switch {
		case state != stateHeld: // released or lost while the extension ran
			return le.endedError()
		case v <= 0:
			reason = fmt.Sprintf("the extension took %v and left no validity", elapsed.Round(time.Microsecond))
		default:
			reason = "the validity ran out before the majority confirmed"
		}
	} else if ctx.Err() != nil && time.Now().Before(until) {
		// Cancelled by the caller: the lease keeps its current validity.
		err := ctxError(ctx, "extend", le.key)
		ev.Err = err
		l.cfg.observer.ObserveExtend(ev)
		return err
	}
	qe := &QuorumError{Op: OpExtend, Key: le.key, N: n, Quorum: l.quorum, Confirmed: t.ok, Held: t.held, Nodes: nodeErrs, Reason: reason, Err: ErrLeaseLost}
	ev.Err = qe
	l.cfg.observer.ObserveExtend(ev)
	le.mu.Lock()
	ended := le.endLocked(stateLost, qe)
	le.mu.Unlock()
	if ended {
		l.cfg.observer.ObserveLost(LostEvent{Key: le.key, Reason: LostExtendFailed, Held: time.Since(le.start)})
		close(le.lost)
		return qe
	}
	return le.endedError()
}

// endedError is Extend's error on a lease that has ended: it matches
// ErrLeaseLost, and ErrReleased too when Unlock ended it.
func (le *Lease) endedError() error {
	le.mu.Lock()
	state, err := le.state, le.err
	le.mu.Unlock()
	if state == stateReleased {
		return fmt.Errorf("quorum: extend %q: %w: %w", le.key, ErrLeaseLost, ErrReleased)
	}
	return fmt.Errorf("quorum: extend %q: %w", le.key, err)
}

// checkTTL validates a TTL given to Extend.
func (l *Locker) checkTTL(ttl time.Duration) error {
	switch {
	case ttl < 10*time.Millisecond:
		return fmt.Errorf("TTL must be at least 10ms, got %v", ttl)
	case l.cfg.nodeTimeout+driftAllowance(ttl, l.cfg.drift) >= ttl:
		return fmt.Errorf("TTL %v leaves no validity after the node timeout %v and the drift allowance", ttl, l.cfg.nodeTimeout)
	case l.cfg.guard && ttl > l.cfg.window:
		return fmt.Errorf("TTL %v exceeds the amnesia window %v", ttl, l.cfg.window)
	}
	return nil
}

// Unlock releases the lease: compare-and-delete on every node, so a node
// whose key now belongs to another owner (the lease expired and someone else
// took the key) is left untouched. The lease ends (Lost is closed) whatever
// the outcome.
//
// It returns nil when every node answered and a majority of them still held
// the token. When some nodes did not answer, it returns a *QuorumError
// matching ErrUnlockUnconfirmed that lists them; calling Unlock again retries
// just those nodes (it is always safe to retry). When every node answered
// but fewer than a majority still held the token, the lease had already
// expired, been taken over or been forgotten by restarted nodes, and the
// error matches ErrLeaseLost: work done under it may not have been
// exclusive.
//
// Unlock waits at most one node timeout (plus, right after the acquisition,
// the acquisition's late answers). If ctx may already be done, pass
// context.WithoutCancel(ctx).
func (le *Lease) Unlock(ctx context.Context) error {
	l := le.l
	le.unlockMu.Lock()
	defer le.unlockMu.Unlock()

	le.mu.Lock()
	ended := le.endLocked(stateReleased, fmt.Errorf("quorum: %q: %w", le.key, ErrReleased))
	if le.confirmed == nil {
		le.confirmed = make([]bool, len(l.nodes))
	}
	var targets []int
	for i, ok := range le.confirmed {
		if !ok {
			targets = append(targets, i)
		}
	}
	le.mu.Unlock()
	if ended {
		close(le.lost)
	}

	if len(targets) > 0 {
		le.waitAcquire(ctx)
		keys := []string{le.key}
		start := time.Now()
		c := l.fanOut(ctx, OpRelease, start.Add(l.cfg.nodeTimeout), l.releaseScript, keys, []any{le.token}, targets, le.wg)
		ev := ReleaseEvent{Key: le.key}
		var nodeErrs []NodeError
		handle := func(r nodeResult) {
			if r.err != nil {
				ev.Failed++
				nodeErrs = append(nodeErrs, l.nodeError(r.node, r.err))
				return
			}
			le.mu.Lock()
			le.confirmed[r.node] = true
			if r.val == 1 {
				le.released++
				ev.Released++
			} else {
				ev.NotOwner++
			}
			le.mu.Unlock()
		}
		for got := 0; got < len(targets); got++ {
			r, ok := c.next()
			if ok {
				handle(r)
				continue
			}
			err := c.timeoutError()
			le.mu.Lock()
			var missing []int
			for _, i := range targets {
				if !le.confirmed[i] && !hasNode(nodeErrs, i) {
					missing = append(missing, i)
				}
			}
			le.mu.Unlock()
			for _, i := range missing {
				ev.Failed++
				nodeErrs = append(nodeErrs, l.nodeError(i, err))
			}
			break
		}
		ev.Duration = time.Since(start)
		l.cfg.observer.ObserveRelease(ev)
		if len(nodeErrs) > 0 {
			le.mu.Lock()
			released := le.released
			le.mu.Unlock()
			return &QuorumError{Op: OpRelease, Key: le.key, N: len(l.nodes), Quorum: l.quorum, Confirmed: released, Nodes: nodeErrs, Err: ErrUnlockUnconfirmed}
		}
	}
	le.mu.Lock()
	released := le.released
	le.mu.Unlock()
	if released < l.quorum {
		return fmt.Errorf("quorum: unlock %q: %w: the token was still on %d of %d nodes, %d needed (the lease had expired, was taken over, or nodes lost it)",
			le.key, ErrLeaseLost, released, len(l.nodes), l.quorum)
	}
	return nil
}

func hasNode(errs []NodeError, i int) bool {
	for _, e := range errs {
		if e.Node == i {
			return true
		}
	}
	return false
}

// waitAcquire waits until the acquisition's late requests have returned, so
// that a release cannot overtake a slow SET on the same node. It waits at
// most until the acquisition's deadline plus one node timeout.
func (le *Lease) waitAcquire(ctx context.Context) {
	select {
	case <-le.acqDone:
		return
	default:
	}
	t := time.NewTimer(time.Until(le.acqDeadline) + le.l.cfg.nodeTimeout)
	defer t.Stop()
	select {
	case <-le.acqDone:
	case <-t.C:
	case <-ctx.Done():
	}
}

// errLost reports whether the lease was lost (not released) and why.
func (le *Lease) errLost() (bool, error) {
	le.mu.Lock()
	defer le.mu.Unlock()
	return le.state == stateLost, le.err
}
