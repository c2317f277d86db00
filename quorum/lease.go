package quorum

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
// the package's timing assumptions hold. It is ownership only; keeping it
// alive is Do's job (see keepalive). Its methods are safe for concurrent use.
type Lease struct {
	l           *Locker
	target                // the keys
	token       string    // the value of every key on the nodes that granted them
	fences      []int64   // per key, from the Fencer (nil without one)
	btoken      any       // the token boxed once, for every request's arguments
	start       time.Time // when the acquiring vote started
	acqDeadline time.Time // the acquiring call's deadline
	fast        bool      // the acquisition's lane (see lanes)

	extendMu sync.Mutex // one extension at a time
	unlockMu sync.Mutex // one release at a time

	mu     sync.Mutex
	until  time.Time
	state  leaseState
	err    error // why the lease ended (nil while held)
	lost   chan struct{}
	moved  chan struct{} // capacity 1: until changed
	timer  *time.Timer   // fires at until (nil until armed)
	rel    []uint8       // per node: Unlock's answer (stYes, stNo), stPending until one came
	relBuf [16]uint8
}

// arm starts the validity timer.
func (le *Lease) arm() {
	le.mu.Lock() // expire may run at once; it must see the timer
	defer le.mu.Unlock()
	if le.state == stateHeld && le.timer == nil {
		le.timer = time.AfterFunc(time.Until(le.until), le.expire)
	}
}

// Key returns the locked key (of a multi-key lease, the first in order).
func (le *Lease) Key() string { return le.keys[0] }

// Keys returns the locked keys, sorted.
func (le *Lease) Keys() []string { return slices.Clone(le.keys) }

// Token returns the lease's random token: the value of its keys on the
// nodes that granted them (at least 128 random bits).
func (le *Lease) Token() string { return le.token }

// Fence returns the fence token of Key from the configured Fencer, or 0
// when no Fencer is set. Pass it to the protected resource with every
// write.
func (le *Lease) Fence() int64 { return le.FenceOf(le.keys[0]) }

// FenceOf returns the fence token of key, one of the lease's keys: each key
// has its own, from the sequence every lease on that key draws from. It is
// 0 without a Fencer or for a key the lease does not hold.
func (le *Lease) FenceOf(key string) int64 {
	if i, ok := slices.BinarySearch(le.keys, key); ok && le.fences != nil {
		return le.fences[i]
	}
	return 0
}

// Until returns the end of the lease's validity: the start of the
// acquiring vote (or of the last extension) plus the TTL minus the drift
// allowance. It carries a monotonic clock reading: compare it with
// time.Now, not a wall clock.
func (le *Lease) Until() time.Time {
	le.mu.Lock()
	defer le.mu.Unlock()
	return le.until
}

// Lost returns a channel that is closed when the lease ends: its validity ran
// out, an extension failed, or Unlock was called. Err tells which.
func (le *Lease) Lost() <-chan struct{} { return le.lost }

// Err returns nil while the lease is held, then an error matching
// ErrLeaseLost when it was lost, or ErrReleased when Unlock released it.
func (le *Lease) Err() error {
	le.mu.Lock()
	defer le.mu.Unlock()
	if le.state == stateReleased && le.err == nil {
		le.err = fmt.Errorf("quorum: %q: %w", le.name, ErrReleased)
	}
	return le.err
}

// end moves a held lease to state with err and closes Lost, after telling
// the Observer of a loss (reason not 0), so that whoever wakes on Lost
// finds it recorded. It returns false when the lease had already ended or,
// for an expiry, when an extension moved Until meanwhile.
func (le *Lease) end(state leaseState, err error, reason LostReason) bool {
	le.mu.Lock()
	held := le.state == stateHeld
	if d := time.Until(le.until); held && reason == LostExpired && d > 0 {
		le.timer.Reset(d)
		held = false
	} else if held {
		le.state, le.err = state, err
		if le.timer != nil {
			le.timer.Stop()
		}
	}
	le.mu.Unlock()
	if held {
		if reason != 0 {
			le.l.cfg.observer.ObserveLost(LostEvent{Key: le.name, Reason: reason, Held: time.Since(le.start)})
		}
		close(le.lost)
	}
	return held
}

// expire runs when the validity timer fires.
func (le *Lease) expire() {
	le.end(stateLost, fmt.Errorf("quorum: %q: %w: validity ran out", le.name, ErrLeaseLost), LostExpired)
}

// Extend sets the keys' TTL to ttl on every node that still holds the
// token on every key (compare-and-pexpire, all or nothing per node). It succeeds when a majority confirms before the
// current validity ends; Until then becomes the extension's start plus ttl
// minus the drift allowance, and is never in the past.
//
// Otherwise Until only ever moves earlier:
//   - When a majority answered that the token is gone, or the validity ran
//     out, the lease is lost: Lost is closed and the error matches
//     ErrLeaseLost (a *QuorumError listing the nodes).
//   - When the outcome is unclear (nodes timed out or failed, or ctx
//     ended), the nodes may or may not have applied the new TTL: Until
//     becomes the earlier of its value and what the new TTL would give, and
//     the error matches ErrExtendUnconfirmed (and ctx.Err()). The lease
//     stays held until then, so Extend may be tried again.
//
// On a lease that already ended it returns an error matching ErrLeaseLost.
// ttl obeys the same rule as WithTTL.
func (le *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	l := le.l
	if err := l.cfg.checkTTL(ttl); err != nil {
		return fmt.Errorf("quorum: extend %q: %w", le.name, err)
	}
	ttl = ttl.Truncate(time.Millisecond)
	le.extendMu.Lock()
	defer le.extendMu.Unlock()
	start, until := time.Now(), le.Until() // start before the first request leaves
	if !start.Before(until) {
		le.expire()
	}
	if le.Err() != nil {
		return le.endedError()
	}
	var bttl any = l.ttlArg
	if ttl != l.cfg.ttl {
		bttl = ttl.Milliseconds()
	}
	c := l.send(ctx, request{op: OpExtend, key: le.name, keys: le.keys, fast: le.fast,
		args: scripts[OpExtend].evalsha(le.boxed, le.btoken, bttl), deadline: earlier(start.Add(l.cfg.nodeTimeout), until)})
	v := l.collect(c, stopDecided, classifyYesNo, newTally(len(l.nodes)))
	ev := ExtendEvent{Key: le.name, Duration: time.Since(start), Confirmed: v.t.ok}
	return le.settleExtend(ctx, v, until, l.cfg.leaseEnd(start, ttl), ev)
}

// settleExtend applies an extension's vote to the lease (see Extend) and
// reports ev to the Observer.
func (le *Lease) settleExtend(ctx context.Context, v vote, until, end time.Time, ev ExtendEvent) error {
	l := le.l
	now := time.Now()
	won := v.t.verdict() == won
	var reason string
	switch {
	case won && now.Before(until) && now.Before(end):
		if !le.moveUntil(end, false) {
			return le.endedError()
		}
	case v.t.held >= l.quorum:
		reason = "the token is gone from a majority"
	case won && !now.Before(until):
		reason = "the validity ran out before the majority confirmed"
	case won:
		reason = fmt.Sprintf("the extension took %v and left no validity", ev.Duration.Round(time.Microsecond))
	case !now.Before(earlier(until, end)):
		reason = "the extension was not confirmed and no validity is left"
	default: // unclear: some nodes may have applied the new TTL
		if !le.moveUntil(earlier(until, end), true) {
			return le.endedError()
		}
		ev.Err = l.quorumError(OpExtend, le.name, v.t, v.errs, "", ErrExtendUnconfirmed)
		if cerr := ctxErr(ctx); cerr != nil {
			ev.Err = fmt.Errorf("quorum: extend %q: %w: %w", le.name, cerr, ev.Err)
		}
	}
	if reason != "" {
		ev.Err = l.quorumError(OpExtend, le.name, v.t, v.errs, reason, ErrLeaseLost)
	}
	l.cfg.observer.ObserveExtend(ev)
	if reason != "" && !le.end(stateLost, ev.Err, LostExtendFailed) {
		return le.endedError()
	}
	return ev.Err
}

// moveUntil sets the validity to u (only earlier, with onlyEarlier), or
// returns false when the lease has ended.
func (le *Lease) moveUntil(u time.Time, onlyEarlier bool) bool {
	le.mu.Lock()
	defer le.mu.Unlock()
	if le.state != stateHeld {
		return false
	}
	if !onlyEarlier || u.Before(le.until) {
		le.until = u
		if le.timer != nil {
			le.timer.Reset(time.Until(u))
		}
		signal(le.moved)
	}
	return true
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// endedError is Extend's error on an ended lease: ErrLeaseLost, and
// ErrReleased too when Unlock ended it.
func (le *Lease) endedError() error {
	if err := le.Err(); !errors.Is(err, ErrReleased) {
		return fmt.Errorf("quorum: extend %q: %w", le.name, err)
	}
	return fmt.Errorf("quorum: extend %q: %w: %w", le.name, ErrLeaseLost, ErrReleased)
}
