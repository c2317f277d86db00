package quorum

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/lease"
)

var _ lease.Lease = (*Lease)(nil)

// Lease is a held lock: the right to act on its keys until Until, provided
// the timing assumptions hold. Do keeps one alive. Safe for concurrent use.
type Lease struct {
	l           *Locker
	target                // the keys
	token       string    // the value of every key on the nodes that granted them
	fences      []int64   // per key, from the Fencer (nil without one)
	btoken      any       // the token boxed once, for every request's arguments
	start       time.Time // when the acquiring vote started
	acqDeadline time.Time // the acquiring call's deadline
	fast        bool      // the acquisition's lane (see lanes)
	handovers   int       // hand-overs in a row that led to this lease (see handover)

	extendMu sync.Mutex // one extension at a time
	unlockMu sync.Mutex // one release at a time
	unlocked bool       // under unlockMu: Unlock was called

	mu     sync.Mutex
	until  time.Time
	ended  bool
	err    error // why the lease was lost; nil while held or once released, until Err
	lost   chan struct{}
	moved  chan struct{} // capacity 1: until changed
	timer  *time.Timer   // fires at until (nil until armed)
	rel    []uint8       // per node: Unlock's answer (stYes, stNo), stPending until one came
	relBuf [16]uint8
}

// arm starts the validity timer, and tells this Locker's waiters that the
// keys are held here (see waker.hold) until the lease ends.
func (le *Lease) arm() {
	le.mu.Lock() // expire may run at once; it must see the timer
	defer le.mu.Unlock()
	if !le.ended && le.timer == nil {
		le.timer = time.AfterFunc(time.Until(le.until), le.expire)
		le.l.wk.hold(le.keys)
	}
}

// Key returns the locked key (of a multi-key lease, the first in order).
func (le *Lease) Key() string { return le.keys[0] }

// Keys returns the locked keys, sorted.
func (le *Lease) Keys() []string { return slices.Clone(le.keys) }

// Token returns the lease's token, its keys' value: at least 128 random bits.
func (le *Lease) Token() string { return le.token }

// Fence returns Key's fence token (0 without a Fencer): pass it with every write.
func (le *Lease) Fence() int64 { return le.FenceOf(le.keys[0]) }

// FenceOf returns the fence token of key, from the sequence of every lease
// on key; 0 without a Fencer or for a key the lease does not hold.
func (le *Lease) FenceOf(key string) int64 {
	if i, ok := slices.BinarySearch(le.keys, key); ok && le.fences != nil {
		return le.fences[i]
	}
	return 0
}

// Until returns the end of the validity: the start of the acquiring vote (or
// last extension) + TTL - drift allowance, monotonic: compare with time.Now.
func (le *Lease) Until() time.Time {
	le.mu.Lock()
	defer le.mu.Unlock()
	return le.until
}

// Lost returns a channel closed when the lease ends: its validity ran out,
// an extension failed, or Unlock was called. Err tells which.
func (le *Lease) Lost() <-chan struct{} { return le.lost }

// Err returns nil while the lease is held, then an error matching
// lease.ErrLeaseLost when it was lost, or lease.ErrReleased when Unlock released it.
func (le *Lease) Err() error {
	le.mu.Lock()
	defer le.mu.Unlock()
	if le.ended && le.err == nil {
		le.err = fmt.Errorf("quorum: %q: %w", le.name, lease.ErrReleased)
	}
	return le.err
}

// TokenDigest returns lease.TokenDigest of the lease's token: safe to log.
func (le *Lease) TokenDigest() string { return lease.TokenDigest(le.token) }

// LogValue makes a lease safe to pass to log/slog: it logs as a group of
// its key, token digest, fence and the validity left, never the token.
func (le *Lease) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.String("key", le.name),
		slog.String("token", le.TokenDigest()),
		slog.Duration("valid_for", max(time.Until(le.Until()), 0)),
	}
	if f := le.Fence(); f != 0 {
		attrs = append(attrs, slog.Int64("fence", f))
	}
	return slog.GroupValue(attrs...)
}

// String describes the lease for humans: key and token digest, never the token.
func (le *Lease) String() string {
	return "lease " + le.name + " token " + le.TokenDigest()
}

// end ends a held lease, lost with err for reason or (reason 0) released. It
// reports a loss before closing Lost, for whoever wakes on it, and returns false
// if the lease had ended or, for an expiry, an extension moved Until meanwhile.
func (le *Lease) end(err error, reason lease.LostReason) bool {
	le.mu.Lock()
	held, armed := !le.ended, le.timer != nil
	if d := time.Until(le.until); held && reason == lease.LostExpired && d > 0 {
		le.timer.Reset(d)
		held = false
	} else if held {
		le.ended, le.err = true, err
		if armed {
			le.timer.Stop()
		}
	}
	le.mu.Unlock()
	if held && armed {
		le.l.wk.unhold(le.keys)
	}
	if held {
		if reason != 0 {
			le.l.cfg.observer.ObserveLost(lease.LostEvent{Key: le.name, Reason: reason, Held: time.Since(le.start)})
		}
		close(le.lost)
	}
	return held
}

// expire runs when the validity timer fires.
func (le *Lease) expire() {
	le.end(fmt.Errorf("quorum: %q: %w: validity ran out", le.name, lease.ErrLeaseLost), lease.LostExpired)
}

// Extend sets the keys' TTL to ttl (which obeys WithTTL's rule) on every node
// that still holds the token on every key (compare-and-pexpire, all or nothing
// per node); on an ended lease it fails with lease.ErrLeaseLost. It succeeds when a
// majority confirms before the validity ends; Until then becomes the
// extension's start plus ttl minus the drift allowance, never in the past.
// Otherwise Until only ever moves earlier:
//   - When a majority answered that the token is gone, or the validity ran
//     out, the lease is lost: Lost is closed and the error matches
//     lease.ErrLeaseLost (a *QuorumError listing the nodes).
//   - When the outcome is unclear (nodes timed out or failed, or ctx
//     ended), the new TTL may or may not apply: Until becomes the earlier
//     of its value and what the new TTL gives, and the error matches
//     lease.ErrExtendUnconfirmed (and ctx.Err()). The lease stays held until
//     then, so Extend may be tried again.
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
	c := l.send(ctx, request{op: OpExtend, script: extendScript, key: le.name, keys: le.keys, fast: le.fast,
		args: extendScript.evalsha(le.boxed, le.btoken, bttl), deadline: earlier(start.Add(l.cfg.nodeTimeout), until)})
	t := l.collect(c, stopDecided, newTally(len(l.nodes)))
	ev := lease.ExtendEvent{Key: le.name, Duration: time.Since(start), Confirmed: t.ok}
	return le.settleExtend(ctx, t, until, l.cfg.leaseEnd(start, ttl), ev)
}

// settleExtend applies an extension's vote to the lease and the Observer.
func (le *Lease) settleExtend(ctx context.Context, t tally, until, end time.Time, ev lease.ExtendEvent) error {
	l := le.l
	now := time.Now()
	won := t.verdict() == won
	var reason string
	switch {
	case won && now.Before(until) && now.Before(end):
		if !le.moveUntil(end, false) {
			return le.endedError()
		}
	case t.held >= l.quorum:
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
		ev.Err = l.quorumError(OpExtend, le.name, t, "", lease.ErrExtendUnconfirmed)
		if cerr := ctxErr(ctx); cerr != nil {
			ev.Err = fmt.Errorf("quorum: extend %q: %w: %w", le.name, cerr, ev.Err)
		}
	}
	if reason != "" {
		ev.Err = l.quorumError(OpExtend, le.name, t, reason, lease.ErrLeaseLost)
	}
	l.cfg.observer.ObserveExtend(ev)
	if reason != "" && !le.end(ev.Err, lease.LostExtendFailed) {
		return le.endedError()
	}
	return ev.Err
}

// moveUntil sets Until to u (only earlier, with onlyEarlier) if still held.
func (le *Lease) moveUntil(u time.Time, onlyEarlier bool) bool {
	le.mu.Lock()
	defer le.mu.Unlock()
	if le.ended {
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

// endedError is Extend's error on an ended lease: lease.ErrLeaseLost, and
// lease.ErrReleased too when Unlock ended it.
func (le *Lease) endedError() error {
	if err := le.Err(); !errors.Is(err, lease.ErrReleased) {
		return fmt.Errorf("quorum: extend %q: %w", le.name, err)
	}
	return fmt.Errorf("quorum: extend %q: %w: %w", le.name, lease.ErrLeaseLost, lease.ErrReleased)
}
