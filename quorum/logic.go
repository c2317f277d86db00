package quorum

import "time"

// clockMargin, the fixed part of the drift allowance, covers the
// millisecond granularity of PX expiry.
const clockMargin = 2 * time.Millisecond

// majority returns the number of nodes that forms a majority of n.
func majority(n int) int { return n/2 + 1 }

// driftAllowance returns ttl*drift + 2ms: the part of a lease given up to
// clock rate differences between this process and the nodes.
func driftAllowance(ttl time.Duration, drift float64) time.Duration {
	return time.Duration(float64(ttl)*drift) + clockMargin
}

// validity returns ttl - elapsed - (ttl*drift + 2ms): how long a lease
// with ttl is safe to use, elapsed after its first request left.
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
	ok        int // confirmed
	held      int // answered "held by another owner" (or "not ours")
	failed    int // errors, timeouts, warming
}

func newTally(n int) tally { return tally{n: n, quorum: majority(n)} }

// answered returns how many nodes have answered so far.
func (t tally) answered() int { return t.ok + t.held + t.failed }

// verdict decides as early as possible: won once a majority confirmed,
// beaten once a majority is out of reach.
func (t tally) verdict() verdict {
	switch {
	case t.ok >= t.quorum:
		return won
	case t.held+t.failed > t.n-t.quorum:
		return beaten
	}
	return undecided
}

// cause classifies a lost vote: ErrNotAcquired when a majority answered
// that another owner holds the key, or no node failed (a split vote);
// ErrQuorumUnavailable when node failures kept the majority out of reach.
func (t tally) cause() error {
	if t.held >= t.quorum || t.failed == 0 {
		return ErrNotAcquired
	}
	return ErrQuorumUnavailable
}

// backoffCap returns the upper bound of the delay before retry number retry
// (0 for the first retry): base doubled retry times, never above max.
func backoffCap(retry int, base, max time.Duration) time.Duration {
	if base <= 0 || max <= 0 {
		return 0
	}
	if base >= max || retry < 0 {
		return min(base, max)
	}
	if retry >= 62 || base > max>>uint(retry) {
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
