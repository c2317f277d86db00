package quorum

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/quorumlock/quorumlock/lease"
)

// maxHandovers bounds the hand-overs in a row on one Locker's keys: the
// lease that reaches it is released, with no early wake-up of this
// Locker's waiters, so that other Lockers' waiters (woken by the release
// message, as this Locker's are then) get their turn.
const maxHandovers = 8

// handover is an Unlock that passes the keys to the oldest Lock call of
// this Locker waiting for exactly them (see Lease.Unlock): one round of the
// handover script instead of a release and the waiter's own vote.
type handover struct {
	le     *Lease  // the lease being released
	wt     *waiter // the waiter, reserved for it
	token  string  // the next lease's
	btoken any
	start  time.Time // before the first request left
	c      *call     // the round (set by releaseRound)
}

// offer is a lease handed over to a waiter, with the round that set it:
// its late answers, and an undo, release what it set.
type offer struct {
	le *Lease
	c  *call
}

// nextHolder reserves the waiter the keys can be handed over to, if any.
func (le *Lease) nextHolder() *handover {
	if le.handovers >= maxHandovers {
		return nil
	}
	wt := le.l.wk.reserve(le.keys)
	if wt == nil {
		return nil
	}
	token := rand.Text()
	return &handover{le: le, wt: wt, token: token, btoken: token}
}

// settle ends the hand-over once the round decided (won: a majority set
// the new token): it gives the new lease to the waiter and reports true,
// or releases what the round may have set and lets the waiter try again.
// A nil hand-over reports false.
func (h *handover) settle(won bool) bool {
	if h == nil {
		return false
	}
	l := h.le.l
	if until := l.cfg.leaseEnd(h.start, l.cfg.ttl); won && time.Now().Before(until) {
		// Armed by the waiter (after the Fencer), as an acquired lease.
		nl := &Lease{l: l, target: h.le.target, token: h.token, btoken: h.btoken, start: h.start, until: until,
			acqDeadline: h.c.req.deadline, fast: h.le.fast, handovers: h.le.handovers + 1,
			lost: make(chan struct{}), moved: make(chan struct{}, 1)}
		if l.wk.offer(h.wt, offer{le: nl, c: h.c}) {
			return true
		}
	} else {
		l.wk.unreserve(h.wt)
	}
	h.c.undo(h.le.boxed, h.btoken)
	return false
}

// accept takes a lease handed over to a Lock call, as attempt returns one
// it won: within its validity, and with its fences when there is a Fencer.
func (l *Locker) accept(ctx context.Context, o offer) (*Lease, bool, error) {
	if !time.Now().Before(o.le.until) {
		o.abandon()
		t := tally{n: len(l.nodes), quorum: l.quorum, ok: l.quorum}
		reason := fmt.Sprintf("the hand-over reached the waiter after its validity ran out (%v)", time.Since(o.le.start).Round(time.Microsecond))
		return nil, true, l.quorumError(OpAcquire, o.le.name, t, reason, lease.ErrQuorumUnavailable)
	}
	if l.cfg.fencer != nil && o.le.fenced() > 0 {
		return l.fence(ctx, o.le, o.c)
	}
	o.le.arm()
	return o.le, true, nil
}

// abandon releases a lease handed over to a Lock call that will not use it.
func (o offer) abandon() {
	o.le.end(nil, 0)
	o.c.undo(o.le.boxed, o.le.btoken)
}
