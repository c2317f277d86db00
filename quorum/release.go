package quorum

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/lease"
)

// undo marks a failed acquisition undone and releases in the background what
// it may have set: now on the nodes that answered, later on others (deliver).
func (c *call) undo(keys []any, btoken any) {
	args := releaseScript.evalsha(keys, btoken)
	c.mu.Lock()
	c.undoArgs = args
	var nodes []int
	for _, r := range c.res {
		if mayHold(r) {
			nodes = append(nodes, r.node)
		}
	}
	c.mu.Unlock()
	if len(nodes) > 0 {
		c.l.releaseBG(c.parent, c.req, args, nodes, false)
	}
}

// releaseBG runs compare-and-delete (args) on nodes, on acq's lane, without
// waiting. counted: the caller (a worker) holds an in-flight count for it.
func (l *Locker) releaseBG(ctx context.Context, acq request, args []any, nodes []int, counted bool) {
	rr := &releaseRun{l: l, key: acq.key, start: time.Now()}
	rr.left.Store(int32(len(nodes)))
	l.send(ctx, request{op: OpRelease, script: releaseScript, key: acq.key, keys: acq.keys, args: args, fast: acq.fast, deadline: rr.start.Add(l.cfg.nodeTimeout),
		targets: nodes, detached: true, counted: counted, onAnswer: rr})
}

// Unlock releases the lease: compare-and-delete of every key on every node,
// so a key that now belongs to another owner is left untouched. The lease
// ends (Lost is closed) whatever the outcome. When the oldest Lock call of
// this Locker waiting for the keys waits for exactly these keys, the first
// Unlock hands the keys over to it in the same script call: each node sets
// every key from this lease's token to a new one, and that call returns the
// new lease without a vote of its own (up to 8 hand-overs in a row; then
// the keys are released, for other Lockers' waiters to take their turn).
//
// It returns nil as soon as a majority confirmed the release; the other
// nodes are released in the background (Close waits for them), each after
// its own acquire request returned. When so many nodes answered "not ours"
// that no majority held the token (the lease expired, was taken over or
// forgotten by restarted nodes), the error matches lease.ErrLeaseLost: the work
// done under it may not have been exclusive. When no majority confirmed in
// time, it matches lease.ErrUnlockUnconfirmed; calling Unlock again asks only the
// nodes still unknown. ctx does not cut the requests short, so a cancelled
// context never strands a release.
func (le *Lease) Unlock(ctx context.Context) error {
	l := le.l
	le.unlockMu.Lock()
	defer le.unlockMu.Unlock()
	le.end(nil, 0)
	var ho *handover
	targets, t := le.releaseTargets()
	if len(targets) > 0 && t.verdict() == undecided {
		if !le.unlocked {
			ho = le.nextHolder()
		}
		le.unlocked = true
		errs := le.releaseRound(ctx, targets, t, ho)
		_, t = le.releaseTargets() // what every try confirmed, not this one alone
		t.errs = errs
	}
	won := t.ok >= l.quorum // on a hand-over (the first try), the next lease's vote too
	switch {
	case ho.settle(won):
		return nil
	case t.held > len(l.nodes)-l.quorum:
		return l.quorumError(OpRelease, le.name, t,
			"the token was no longer on a majority (the lease had expired, was taken over, or nodes lost it)", lease.ErrLeaseLost)
	case won:
		if le.handovers < maxHandovers {
			for _, k := range le.keys {
				l.wk.released(k) // a waiter of this Locker may go now
			}
		}
		return nil
	}
	qe := l.quorumError(OpRelease, le.name, t, "", lease.ErrUnlockUnconfirmed)
	if cerr := ctxErr(ctx); cerr != nil {
		return fmt.Errorf("quorum: unlock %q: %w: %w", le.name, cerr, qe)
	}
	return qe
}

// releaseTargets returns the nodes whose release is still unknown, and the
// tally of those known (confirmed, or "not ours") over every Unlock.
func (le *Lease) releaseTargets() ([]int, tally) {
	le.mu.Lock()
	defer le.mu.Unlock()
	if le.rel == nil {
		if n := len(le.l.nodes); n <= len(le.relBuf) {
			le.rel = le.relBuf[:n] // stPending, as new
		} else {
			le.rel = make([]uint8, n)
		}
	}
	targets := make([]int, 0, len(le.rel))
	t := newTally(len(le.l.nodes))
	for i, s := range le.rel {
		switch s {
		case stPending:
			targets = append(targets, i)
		case stYes:
			t.ok++
		case stNo:
			t.held++
		}
	}
	return targets, t
}

// releaseRound sends the release (with ho, the hand-over) to targets and
// waits for a majority of confirmations over every try (base), or a node
// timeout after the later of now and the acquisition's deadline: a node
// still acquiring releases after.
func (le *Lease) releaseRound(ctx context.Context, targets []int, base tally, ho *handover) []NodeError {
	l := le.l
	start := time.Now()
	deadline := start.Add(max(le.acqDeadline.Sub(start), 0) + l.cfg.nodeTimeout)
	rr := &releaseRun{l: l, le: le, key: le.name, start: start}
	rr.left.Store(int32(len(targets)) + 1) // and the decision below
	script, args := releaseScript, releaseScript.evalsha(le.boxed, le.btoken)
	if ho != nil {
		ho.start = start // before the first request leaves
		script, args = handoverScript, handoverScript.evalsha(le.boxed, le.btoken, ho.btoken, l.ttlArg)
	}
	c := l.send(ctx, request{op: OpRelease, script: script, key: le.name, keys: le.keys,
		args: args, deadline: deadline, targets: targets, fast: le.fast, detached: true, onAnswer: rr})
	if ho != nil {
		ho.c = c
	}
	// Only a majority of confirmations ends the wait early: a "not ours"
	// may come from a node that a previous try released a moment before.
	t := l.collect(c, stopWon, base)
	rr.decided = time.Since(start)
	rr.leave()
	return t.errs
}

// releaseRun counts one release call's answers (for Unlock, le set, in the
// lease too), and reports one ReleaseEvent once every request has ended
// and, for Unlock, the caller has decided.
type releaseRun struct {
	l       *Locker
	le      *Lease // nil for a background release
	key     string
	start   time.Time
	decided time.Duration // how long Unlock waited; written before it leaves
	left    atomic.Int32  // requests still out, and Unlock's decision

	released, notOwner, failed atomic.Int32
}

func (rr *releaseRun) record(r nodeResult) {
	s, err := classify(OpRelease, r.val)
	switch {
	case r.err != nil || err != nil:
		rr.failed.Add(1)
	case s == stYes:
		rr.released.Add(1)
	default:
		rr.notOwner.Add(1)
	}
	if le := rr.le; le != nil && r.err == nil && err == nil {
		le.mu.Lock()
		// A retried Unlock may ask a node whose first release is still out:
		// it answers "not ours". A release once confirmed stays so.
		if le.rel[r.node] != stYes {
			le.rel[r.node] = s
		}
		le.mu.Unlock()
	}
	rr.leave()
}

// leave ends a request or Unlock's decision; the last reports the event.
func (rr *releaseRun) leave() {
	if rr.left.Add(-1) != 0 {
		return
	}
	d := rr.decided
	if rr.le == nil {
		d = time.Since(rr.start)
	}
	rr.l.cfg.observer.ObserveRelease(lease.ReleaseEvent{Key: rr.key, Duration: d,
		Released: int(rr.released.Load()), NotOwner: int(rr.notOwner.Load()), Failed: int(rr.failed.Load())})
}
