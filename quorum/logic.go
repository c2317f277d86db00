package quorum

import (
	"fmt"
	"time"

	"github.com/quorumlock/quorumlock/lease"
)

// clockMargin, the fixed part of the drift allowance, covers PX's 1ms granularity.
const clockMargin = 2 * time.Millisecond

func majority(n int) int { return n/2 + 1 }

// driftAllowance returns ttl*drift + 2ms: the part of a lease given up to
// clock rate differences between this process and the nodes.
func driftAllowance(ttl time.Duration, drift float64) time.Duration {
	return time.Duration(float64(ttl)*drift) + clockMargin
}

// validity is how long a lease with ttl is safe to use, elapsed after it started.
func validity(ttl, elapsed time.Duration, drift float64) time.Duration {
	return ttl - elapsed - driftAllowance(ttl, drift)
}

// verdict is the state of a vote.
type verdict uint8

const (
	undecided verdict = iota
	won               // a majority confirmed
	beaten            // a majority can no longer confirm
)

// tally counts the answers of n nodes to one request.
type tally struct {
	n, quorum int
	ok        int         // confirmed
	held      int         // answered "held by another owner" (or "not ours")
	failed    int         // errors, timeouts, warming
	errs      []NodeError // why they failed (see collect)
}

func newTally(n int) tally { return tally{n: n, quorum: majority(n)} }

// verdict decides early: won once a majority confirmed, beaten once out of reach.
func (t tally) verdict() verdict {
	switch {
	case t.ok >= t.quorum:
		return won
	case t.held+t.failed > t.n-t.quorum:
		return beaten
	}
	return undecided
}

// cause classifies a lost vote: lease.ErrNotAcquired when a majority said "held" or
// no node failed (a split vote), else lease.ErrQuorumUnavailable.
func (t tally) cause() error {
	if t.held >= t.quorum || t.failed == 0 {
		return lease.ErrNotAcquired
	}
	return lease.ErrQuorumUnavailable
}

// backoffCap returns the upper bound of the delay before retry number retry
// (0 for the first retry): base doubled retry times, never above max.
func backoffCap(retry int, base, max time.Duration) time.Duration {
	switch {
	case base <= 0 || max <= 0:
		return 0
	case base >= max || retry < 0:
		return min(base, max)
	case retry >= 62 || base > max>>uint(retry):
		return max
	}
	return base << uint(retry)
}

// backoffDelay returns a full-jitter delay: uniform in [0, backoffCap).
// randN must return a uniform value in [0, n) for n > 0.
func backoffDelay(retry int, base, max time.Duration, randN func(int64) int64) time.Duration {
	c := backoffCap(retry, base, max)
	if c <= 0 {
		return 0
	}
	return time.Duration(randN(int64(c)))
}

// A node's answer to one request.
const (
	stPending uint8 = iota
	stYes           // granted, extended or released
	stNo            // held by another owner, or the token was not there
	stFailed        // an error or no answer: the request may have been applied
)

// When collect stops before every target answered.
const (
	stopDecided = iota // as soon as a majority said yes, or can no longer
	stopWon            // as soon as a majority said yes
)

// collect adds c's answers to t (a retried Unlock's earlier answers; else
// newTally) until stop says, or the call's deadline or the caller's context
// ends: the rest then count as failed.
func (l *Locker) collect(c *call, stop int, t tally) tally {
	for read := 0; read < c.n; read++ {
		if vd := t.verdict(); (stop == stopDecided && vd != undecided) || (stop == stopWon && vd == won) {
			break
		}
		r, ok := c.next()
		if !ok {
			err := c.lateError(false)
			for i := range c.n {
				if n := c.target(i); !c.answered(n) {
					t.failed++
					t.errs = append(t.errs, l.nodeError(n, err))
				}
			}
			break
		}
		s, err := stFailed, r.err
		if err == nil {
			s, err = classify(c.req.op, r.val)
		}
		switch {
		case err != nil:
			t.failed++
			t.errs = append(t.errs, l.nodeError(r.node, err))
		case s == stYes:
			t.ok++
		default:
			t.held++
		}
	}
	return t
}

// quorumError is the one place that builds a *QuorumError.
func (l *Locker) quorumError(op Op, key string, t tally, reason string, sentinel error) *QuorumError {
	return &QuorumError{
		Op: op, Key: key, N: len(l.nodes), Quorum: l.quorum,
		Confirmed: t.ok, Held: t.held, Nodes: t.errs, Reason: reason, Err: sentinel,
	}
}

func (l *Locker) nodeError(i int, err error) NodeError {
	return NodeError{Node: i, Addr: l.nodes[i].addr, Err: err}
}

// warmingError is the node error for the acquire script's answer -ms.
func warmingError(v int64) error {
	return fmt.Errorf("%w: %v left", ErrNodeWarming, time.Duration(-v)*time.Millisecond)
}

// classify reads op's script answer: 1 done, 0 held by another owner (or
// not our token), else stFailed and a node error (-ms: a warming node).
func classify(op Op, val int64) (uint8, error) {
	switch {
	case val == 1:
		return stYes, nil
	case val == 0:
		return stNo, nil
	case op != OpAcquire:
		return stFailed, fmt.Errorf("quorum: unexpected answer %d", val)
	case val < 0:
		return stFailed, warmingError(val)
	}
	return stFailed, fmt.Errorf("quorum: unexpected acquire answer %d", val)
}
