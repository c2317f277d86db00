package quorum

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
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
	// bkey and btoken are key and token boxed once, for the arguments of
	// every request of the lease.
	bkey, btoken any
	start        time.Time // when the acquiring vote started
	wg           *sync.WaitGroup

	acqDeadline time.Time // the acquiring call's deadline

	extendMu sync.Mutex // one extension at a time
	unlockMu sync.Mutex // one release at a time

	mu     sync.Mutex
	until  time.Time
	state  leaseState
	err    error // why the lease ended (nil while held)
	lost   chan struct{}
	timer  *time.Timer // fires at until (nil until armed)
	rel    []uint8     // per node: the answer to Unlock (stYes released, stNo not ours), stPending until one came
	relBuf [16]uint8

	// Do's safety margin: onMargin runs once when less than margin of the
	// validity is left (see watchMargin).
	margin      time.Duration
	onMargin    func()
	marginTimer *time.Timer
}

// newLease returns a held lease whose validity timer is not armed yet: arm
// it once the lease is handed out (after the Fencer), so that a lease never
// handed out reports no loss.
func newLease(l *Locker, key, token string, start, until time.Time, c *call, wg *sync.WaitGroup) *Lease {
	return &Lease{
		l: l, key: key, token: token, start: start, wg: wg,
		acqDeadline: c.deadline, until: until, lost: make(chan struct{}),
	}
}

// arm starts the validity timer.
func (le *Lease) arm() {
	le.mu.Lock() // expire may run at once; it must see the timer
	defer le.mu.Unlock()
	if le.state == stateHeld && le.timer == nil {
		le.timer = time.AfterFunc(time.Until(le.until), le.expire)
	}
}

// setUntilLocked moves the end of the validity and re-arms the timers;
// le.mu must be held.
func (le *Lease) setUntilLocked(u time.Time) {
	le.until = u
	if le.timer != nil {
		le.timer.Reset(time.Until(u))
	}
	if le.marginTimer != nil {
		le.marginTimer.Reset(time.Until(u) - le.margin)
	}
}

// watchMargin makes f run once, on its own goroutine, as soon as less than
// d of the lease's validity is left while it is held, however the validity
// moves meanwhile (Extend re-arms the timer).
func (le *Lease) watchMargin(d time.Duration, f func()) {
	le.mu.Lock()
	defer le.mu.Unlock()
	le.margin, le.onMargin = d, f
	le.marginTimer = time.AfterFunc(time.Until(le.until)-d, le.marginFire)
}

func (le *Lease) marginFire() {
	le.mu.Lock()
	if le.state != stateHeld || le.onMargin == nil {
		le.mu.Unlock()
		return
	}
	if d := time.Until(le.until) - le.margin; d > 0 { // extended meanwhile
		le.marginTimer.Reset(d)
		le.mu.Unlock()
		return
	}
	f := le.onMargin
	le.onMargin = nil
	le.mu.Unlock()
	f()
}

// detach stops the lease from counting its node requests in Do's wait
// group, once Do is done with it: a lease kept past fn may still be
// unlocked, without touching a wait group that Do is waiting on.
func (le *Lease) detach() {
	le.extendMu.Lock()
	le.unlockMu.Lock()
	le.wg = nil
	le.unlockMu.Unlock()
	le.extendMu.Unlock()
}

// Key returns the locked key.
func (le *Lease) Key() string { return le.key }

// Token returns the lease's random token: the value of the key on the nodes
// that granted it (at least 128 random bits).
func (le *Lease) Token() string { return le.token }

// Fence returns the fence token from the configured Fencer, or 0 when no
// Fencer is set. Pass it to the protected resource with every write.
func (le *Lease) Fence() int64 { return le.fence }

// Until returns the end of the lease's validity: the moment the acquiring
// vote (or the last extension) started, plus the TTL, minus the drift
// allowance. An operation whose outcome is unclear only ever moves it
// earlier. It carries a monotonic clock reading, so compare it with
// time.Now, not a wall clock.
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
	if le.state == stateReleased && le.err == nil {
		le.err = fmt.Errorf("quorum: %q: %w", le.key, ErrReleased)
	}
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
	if le.timer != nil {
		le.timer.Stop()
	}
	if le.marginTimer != nil {
		le.marginTimer.Stop()
	}
	return true
}

// stop ends the lease without a release (used when an acquisition is undone).
func (le *Lease) stop() {
	le.mu.Lock()
	ended := le.endLocked(stateReleased, nil) // Err builds the error when asked
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
// (compare-and-pexpire). It succeeds when a majority confirms before the
// current validity ends; Until then becomes the extension's start plus ttl
// minus the drift allowance (it may move earlier when ttl is shorter than
// what was left), and Extend never returns nil with Until in the past.
//
// Otherwise Until only ever moves earlier:
//   - When a majority answered that the token is gone, or the validity ran
//     out, the lease is lost: Lost is closed and the error matches
//     ErrLeaseLost (a *QuorumError listing the nodes).
//   - When the outcome is unclear (nodes timed out or failed, or ctx ended
//     first), the nodes may or may not have applied the new TTL. Until
//     becomes the earlier of its current value and what the new TTL would
//     give, and the error matches ErrExtendUnconfirmed (and ctx.Err() when
//     ctx ended). The lease stays held until then, so Extend may be tried
//     again; it is lost as above if no validity is left.
//
// An Extend on a lease that already ended returns an error matching
// ErrLeaseLost. ttl obeys the same rule as WithTTL.
func (le *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	l := le.l
	if err := l.cfg.checkTTL(ttl); err != nil {
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
	start := time.Now() // before the first request leaves
	if !start.Before(until) {
		le.expire()
		return le.endedError()
	}
	deadline := earlier(start.Add(l.cfg.nodeTimeout), until)
	var bttl any = l.ttlArg
	if ttl != l.cfg.ttl {
		bttl = ttl.Milliseconds()
	}
	c := l.fanOut(ctx, OpExtend, deadline, l.extendScript, le.key, l.extendScript.evalsha(le.bkey, le.btoken, bttl), nil, le.wg)
	var stBuf [16]uint8
	v := l.collect(c, true, classifyExtend, states(stBuf[:], len(l.nodes)))
	ev := ExtendEvent{Key: le.key, Duration: time.Since(start), Confirmed: v.t.ok}
	end := l.cfg.leaseEnd(start, ttl)
	now := time.Now()
	won := v.t.verdict() == won
	var reason string
	switch {
	case won && now.Before(until) && now.Before(end):
		le.mu.Lock()
		if le.state != stateHeld { // released or lost while the extension ran
			le.mu.Unlock()
			return le.endedError()
		}
		le.setUntilLocked(end)
		le.mu.Unlock()
		l.cfg.observer.ObserveExtend(ev)
		return nil
	case v.t.held >= l.quorum:
		reason = "the token is gone from a majority"
	case won && !now.Before(until):
		reason = "the validity ran out before the majority confirmed"
	case won:
		reason = fmt.Sprintf("the extension took %v and left no validity", ev.Duration.Round(time.Microsecond))
	default:
		// Unclear: some nodes may have applied the new TTL.
		capped := earlier(until, end)
		if !now.Before(capped) {
			reason = "the extension was not confirmed and no validity is left"
			break
		}
		le.mu.Lock()
		if le.state != stateHeld {
			le.mu.Unlock()
			return le.endedError()
		}
		if capped.Before(le.until) {
			le.setUntilLocked(capped)
		}
		le.mu.Unlock()
		qe := l.quorumError(OpExtend, le.key, v.t.ok, v.t.held, v.errs, "", ErrExtendUnconfirmed)
		var err error = qe
		if cerr := ctxErr(ctx); cerr != nil {
			err = fmt.Errorf("quorum: extend %q: %w: %w", le.key, cerr, qe)
		}
		ev.Err = err
		l.cfg.observer.ObserveExtend(ev)
		return err
	}
	qe := l.quorumError(OpExtend, le.key, v.t.ok, v.t.held, v.errs, reason, ErrLeaseLost)
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

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// classifyExtend reads the extend script's answer.
func classifyExtend(val int64) (uint8, error) {
	switch val {
	case 1:
		return stYes, nil
	case 0:
		return stNo, nil
	}
	return stFailed, fmt.Errorf("quorum: unexpected extend answer %d", val)
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

// Unlock releases the lease: compare-and-delete on every node, so a node
// whose key now belongs to another owner (the lease expired and someone else
// took the key) is left untouched. The lease ends (Lost is closed) whatever
// the outcome.
//
// It returns nil as soon as a majority of the nodes confirmed the release:
// the key is then free for the next owner. The other nodes are released in
// the background, each only after that node's own acquire request returned,
// so a slow node delays neither this call nor the next owner, and a release
// never overtakes a late SET (which would leave the key behind until it
// expires). Locker.Close waits for that background work.
//
// When the nodes that answered "not ours" make a majority impossible, the
// lease had already expired, been taken over or been forgotten by restarted
// nodes: the error matches ErrLeaseLost, and work done under the lease may
// not have been exclusive. When no majority confirmed within the node
// timeout (or before ctx ended), it returns a *QuorumError matching
// ErrUnlockUnconfirmed that lists the nodes; calling Unlock again retries the
// nodes whose answer is still unknown (it is always safe to retry).
//
// The requests themselves are not cut short by ctx: they run to their node
// timeout even when ctx ends first, so a cancelled context never strands a
// release.
func (le *Lease) Unlock(ctx context.Context) error {
	l := le.l
	n := len(l.nodes)
	le.unlockMu.Lock()
	defer le.unlockMu.Unlock()

	le.mu.Lock()
	ended := le.endLocked(stateReleased, nil) // Err builds the error when asked
	if le.rel == nil {
		le.rel = states(le.relBuf[:], n)
	}
	base := newTally(n)
	var tbuf [16]int
	targets := tbuf[:0]
	for i, s := range le.rel {
		switch s {
		case stPending:
			targets = append(targets, i)
		case stYes:
			base.ok++
		case stNo:
			base.held++
		}
	}
	le.mu.Unlock()
	if ended {
		close(le.lost)
	}

	var errs []NodeError
	if len(targets) > 0 && base.verdict() == undecided {
		start := time.Now()
		// Each node's worker sends the release only after the node's
		// acquire request has returned: a node whose acquire is still out
		// gets it at the latest at the acquisition's deadline, plus a node
		// timeout for the release itself.
		deadline := start.Add(l.cfg.nodeTimeout)
		if d := le.acqDeadline.Add(l.cfg.nodeTimeout); d.After(deadline) {
			deadline = d
		}
		rr := &releaseRound{le: le, start: start}
		rr.args = [...]any{"evalsha", l.releaseScript.bsha, 1, le.bkey, le.btoken}
		rr.left.Store(int32(len(targets)))
		rr.parties.Store(2)
		var tg []int // nil: every node, the usual first Unlock
		if len(targets) < n {
			tg = slices.Clone(targets)
		}
		c := l.fanOutWith(ctx, OpRelease, deadline, l.releaseScript, le.key, rr.args[:], tg, le.wg,
			callOpts{record: rr, detached: true})
		var stBuf [16]uint8
		// Only a majority of confirmations ends the wait early: a "not
		// ours" may come from a node that a previous try released a moment
		// before, so the other answers are read before calling it lost.
		v := l.collectFrom(c, stopWon, classifyRelease, states(stBuf[:], n), base)
		errs = v.errs
		rr.decide(time.Since(start))
		// Decide on what the nodes confirmed over every try (the recorder
		// keeps a confirmed release confirmed), not on this try's count.
		base = le.releaseTally()
	}
	switch {
	case base.held > n-l.quorum:
		return l.quorumError(OpRelease, le.key, base.ok, base.held, errs,
			"the token was no longer on a majority (the lease had expired, was taken over, or nodes lost it)", ErrLeaseLost)
	case base.ok >= l.quorum:
		l.wk.released(le.key) // a waiter of this Locker may go now
		return nil
	}
	qe := l.quorumError(OpRelease, le.key, base.ok, base.held, errs, "", ErrUnlockUnconfirmed)
	if cerr := ctxErr(ctx); cerr != nil {
		return fmt.Errorf("quorum: unlock %q: %w: %w", le.key, cerr, qe)
	}
	return qe
}

// releaseTally counts the nodes whose release is known: confirmed, or
// answered "not ours", over every Unlock of the lease.
func (le *Lease) releaseTally() tally {
	le.mu.Lock()
	defer le.mu.Unlock()
	t := newTally(len(le.rel))
	for _, s := range le.rel {
		switch s {
		case stYes:
			t.ok++
		case stNo:
			t.held++
		}
	}
	return t
}

// releaseRound is one Unlock's release call. It keeps each node's final
// answer in the lease as it arrives (a retried Unlock asks only the nodes
// still unknown), and reports one ReleaseEvent once both the caller has
// its answer and every request has ended, so the event counts every node
// even when Unlock returned at the majority.
type releaseRound struct {
	le      *Lease
	start   time.Time
	args    [5]any        // the release's EVALSHA arguments, in the same allocation
	decided time.Duration // how long the caller waited; written before its party leaves

	left                       atomic.Int32 // requests still out
	parties                    atomic.Int32 // 2: the requests, and the caller's decision
	released, notOwner, failed atomic.Int32
}

func (rr *releaseRound) record(r nodeResult) {
	switch s, err := classifyRelease(r.val); {
	case r.err != nil || err != nil:
		rr.failed.Add(1)
	default:
		if s == stYes {
			rr.released.Add(1)
		} else {
			rr.notOwner.Add(1)
		}
		le := rr.le
		le.mu.Lock()
		// A node's first release may still be out when a retried Unlock
		// asks it again: the retry then answers "not ours" for a token
		// the first one deleted. A release once confirmed stays so.
		if le.rel[r.node] != stYes {
			le.rel[r.node] = s
		}
		le.mu.Unlock()
	}
	if rr.left.Add(-1) == 0 {
		rr.leave()
	}
}

// decide records how long the caller waited for its answer.
func (rr *releaseRound) decide(d time.Duration) {
	rr.decided = d
	rr.leave()
}

func (rr *releaseRound) leave() {
	if rr.parties.Add(-1) != 0 {
		return
	}
	rr.le.l.cfg.observer.ObserveRelease(ReleaseEvent{Key: rr.le.key, Duration: rr.decided,
		Released: int(rr.released.Load()), NotOwner: int(rr.notOwner.Load()), Failed: int(rr.failed.Load())})
}

// errLost reports whether the lease was lost (not released) and why.
func (le *Lease) errLost() (bool, error) {
	le.mu.Lock()
	defer le.mu.Unlock()
	return le.state == stateLost, le.err
}
