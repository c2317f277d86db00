package quorum

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// undo releases in the background what a failed attempt c may have taken:
// now on nodes that answered, later on the others (see call.deliver).
func (l *Locker) undo(ctx context.Context, c *call, keys []any, btoken any) {
	args := scripts[OpRelease].evalsha(keys, btoken)
	if nodes := c.undo(args); len(nodes) > 0 {
		l.releaseBG(ctx, c.req, args, nodes, false)
	}
}

// releaseBG runs compare-and-delete (args) on nodes, on acq's lane,
// without waiting. counted: the caller (a worker delivering an answer)
// holds an in-flight count, so it is sent even while Close waits.
func (l *Locker) releaseBG(ctx context.Context, acq request, args []any, nodes []int, counted bool) {
	rr := &releaseRun{l: l, key: acq.key, start: time.Now()}
	rr.left.Store(int32(len(nodes)))
	rr.parties.Store(1)
	l.send(ctx, request{op: OpRelease, key: acq.key, keys: acq.keys, args: args, fast: acq.fast, deadline: rr.start.Add(l.cfg.nodeTimeout),
		targets: nodes, detached: true, counted: counted, onAnswer: rr.record})
}

// Unlock releases the lease: compare-and-delete of every key on every node,
// so a key that now belongs to another owner is left untouched. The lease ends (Lost
// is closed) whatever the outcome.
//
// It returns nil as soon as a majority confirmed the release. The other
// nodes are released in the background (Close waits for them), each after
// that node's own acquire request returned, so a slow node delays no one.
// When so many nodes answered "not ours" that no majority held the token,
// the lease had expired, been taken over or been forgotten by restarted
// nodes: the error matches ErrLeaseLost, and the work done under it may
// not have been exclusive. When no majority confirmed in time, the error
// matches ErrUnlockUnconfirmed; Unlock may be called again, and asks only
// the nodes still unknown. ctx does not cut the requests short, so a
// cancelled context never strands a release.
func (le *Lease) Unlock(ctx context.Context) error {
	l := le.l
	le.unlockMu.Lock()
	defer le.unlockMu.Unlock()
	le.end(stateReleased, nil, 0)
	targets, base := le.releaseTargets()
	var errs []NodeError
	if len(targets) > 0 && base.verdict() == undecided {
		errs = le.releaseRound(ctx, targets, base)
		// Decide on what the nodes confirmed over every try, not on this
		// try's count.
		_, base = le.releaseTargets()
	}
	switch {
	case base.held > len(l.nodes)-l.quorum:
		return l.quorumError(OpRelease, le.name, base, errs,
			"the token was no longer on a majority (the lease had expired, was taken over, or nodes lost it)", ErrLeaseLost)
	case base.ok >= l.quorum:
		for _, k := range le.keys {
			l.wk.released(k) // a waiter of this Locker may go now
		}
		return nil
	}
	qe := l.quorumError(OpRelease, le.name, base, errs, "", ErrUnlockUnconfirmed)
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
		le.rel = states(le.relBuf[:], len(le.l.nodes))
	}
	var targets []int
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

// releaseRound sends the release to targets and waits for a majority of
// confirmations over every try (base), or the deadline: a node timeout
// after the later of now and the acquisition's deadline, since a node
// whose acquire is still out gets the release after it.
func (le *Lease) releaseRound(ctx context.Context, targets []int, base tally) []NodeError {
	l := le.l
	start := time.Now()
	deadline := start.Add(l.cfg.nodeTimeout)
	if d := le.acqDeadline.Add(l.cfg.nodeTimeout); d.After(deadline) {
		deadline = d
	}
	rr := &releaseRun{l: l, le: le, key: le.name, start: start}
	args := scripts[OpRelease].evalsha(le.boxed, le.btoken)
	rr.left.Store(int32(len(targets)))
	rr.parties.Store(2)
	var tg []int // nil: every node, the usual first Unlock
	if len(targets) < len(l.nodes) {
		tg = targets
	}
	c := l.send(ctx, request{op: OpRelease, key: le.name, keys: le.keys,
		args: args, deadline: deadline, targets: tg, fast: le.fast, detached: true, onAnswer: rr.record})
	// Only a majority of confirmations ends the wait early: a "not ours"
	// may come from a node that a previous try released a moment before.
	v := l.collect(c, stopWon, classifyYesNo, base)
	rr.decided = time.Since(start)
	rr.leave()
	return v.errs
}

// releaseRun counts one release call's answers, and reports one
// ReleaseEvent once every request has ended and, for Unlock, the caller
// has decided. For Unlock (le set) it keeps each node's final answer in
// the lease.
type releaseRun struct {
	l       *Locker
	le      *Lease // nil for a background release
	key     string
	start   time.Time
	decided time.Duration // how long Unlock waited; written before its party leaves
	left    atomic.Int32  // requests still out
	parties atomic.Int32  // the requests, and Unlock's decision

	released, notOwner, failed atomic.Int32
}

func (rr *releaseRun) record(r nodeResult) {
	s, err := classifyYesNo(r.val)
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
		// A retried Unlock may ask a node whose first release is still
		// out; it then answers "not ours" for a token the first one
		// deleted. A release once confirmed stays so.
		if le.rel[r.node] != stYes {
			le.rel[r.node] = s
		}
		le.mu.Unlock()
	}
	if rr.left.Add(-1) == 0 {
		rr.leave()
	}
}

func (rr *releaseRun) leave() {
	if rr.parties.Add(-1) != 0 {
		return
	}
	d := rr.decided
	if rr.le == nil {
		d = time.Since(rr.start)
	}
	rr.l.cfg.observer.ObserveRelease(ReleaseEvent{Key: rr.key, Duration: d,
		Released: int(rr.released.Load()), NotOwner: int(rr.notOwner.Load()), Failed: int(rr.failed.Load())})
}
