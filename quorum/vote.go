package quorum

import (
	"fmt"
	"time"
)

// Node states during one vote.
const (
	stPending uint8 = iota
	stYes           // granted, extended or released
	stNo            // held by another owner, or the token was not there
	stFailed        // an error or no answer: the request may have been applied
)

// vote is the outcome of one call's answers.
type vote struct {
	t    tally
	errs []NodeError // nodes that failed, timed out or were warming
}

// classifier maps a node's answer to stYes or stNo, or to stFailed and a
// node error for answers that are neither.
type classifier func(val int64) (uint8, error)

// states returns n cleared node states, in buf when it is long enough.
func states(buf []uint8, n int) []uint8 {
	if n > len(buf) {
		return make([]uint8, n)
	}
	st := buf[:n]
	clear(st)
	return st
}

// When collect stops before every target answered.
const (
	stopDecided = iota // as soon as a majority said yes, or can no longer
	stopWon            // as soon as a majority said yes
)

// collect reads c's answers into a vote starting from base (a retried
// Unlock's earlier answers; else newTally) until stop says, or the call's
// deadline or the caller's context ends: the rest then count as failed.
func (l *Locker) collect(c *call, stop int, classify classifier, base tally) vote {
	var stBuf [16]uint8 // node states, on the stack for up to 16 nodes
	st := states(stBuf[:], len(l.nodes))
	v := vote{t: base}
	for read := 0; read < c.n; read++ {
		if vd := v.t.verdict(); (stop == stopDecided && vd != undecided) || (stop == stopWon && vd == won) {
			break
		}
		r, ok := c.next()
		if !ok {
			err := c.lateError(false)
			for i := range c.n {
				if n := c.target(i); st[n] == stPending {
					st[n] = stFailed
					v.t.failed++
					v.errs = append(v.errs, l.nodeError(n, err))
				}
			}
			break
		}
		s, err := stFailed, r.err
		if err == nil {
			s, err = classify(r.val)
		}
		st[r.node] = s // stFailed with err (see classifier)
		switch {
		case err != nil:
			v.t.failed++
			v.errs = append(v.errs, l.nodeError(r.node, err))
		case s == stYes:
			v.t.ok++
		default:
			v.t.held++
		}
	}
	return v
}

// quorumError is the one place that builds a *QuorumError.
func (l *Locker) quorumError(op Op, key string, t tally, errs []NodeError, reason string, sentinel error) *QuorumError {
	return &QuorumError{
		Op: op, Key: key, N: len(l.nodes), Quorum: l.quorum,
		Confirmed: t.ok, Held: t.held, Nodes: errs, Reason: reason, Err: sentinel,
	}
}

func (l *Locker) nodeError(i int, err error) NodeError {
	return NodeError{Node: i, Addr: l.nodes[i].addr, Err: err}
}

// warmingError is the node error for the acquire script's answer -ms.
func warmingError(v int64) error {
	return fmt.Errorf("%w: %v left", ErrNodeWarming, time.Duration(-v)*time.Millisecond)
}

// classifyYesNo reads the answer of the release and extend scripts: 1
// done, 0 held by another owner or the token is not there.
func classifyYesNo(val int64) (uint8, error) {
	switch val {
	case 1:
		return stYes, nil
	case 0:
		return stNo, nil
	}
	return stFailed, fmt.Errorf("quorum: unexpected answer %d", val)
}
