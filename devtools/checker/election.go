package checker

import "sync"

// TermWrite is one write by an elected leader, with its term (the
// leadership lease's fence), in the order the resource saw them.
type TermWrite struct {
	Leader string
	Term   int64
}

// ElectionVerdict is the verdict on a resource written by elected leaders.
type ElectionVerdict struct {
	Report
	// Accepted and Rejected count the writes; Terms counts the distinct
	// terms accepted.
	Accepted, Rejected, Terms int
}

// ElectionResource is a model resource written by the leaders of an
// election. In Fenced mode it refuses a write whose term is below the last
// it accepted. Its Verdict lists every term in which two leaders wrote,
// and every accepted write whose term is below an earlier accepted one (an
// Unfenced resource lets a deposed leader write after its successor). It
// is safe for concurrent use: its order of operations is the order Write
// was called in.
type ElectionResource struct {
	mu       sync.Mutex
	mode     Mode
	last     int64
	lastBy   string
	leaderOf map[int64]string   // the first leader accepted in each term
	reported map[TermWrite]bool // the second leaders already reported
	v        ElectionVerdict
}

// NewElectionResource returns an empty resource.
func NewElectionResource(mode Mode) *ElectionResource {
	return &ElectionResource{mode: mode, leaderOf: map[int64]string{}, reported: map[TermWrite]bool{}}
}

// CheckElection judges a recorded history: writes in the order the
// resource saw them.
func CheckElection(mode Mode, writes []TermWrite) ElectionVerdict {
	r := NewElectionResource(mode)
	for _, w := range writes {
		r.Write(w.Leader, w.Term)
	}
	return r.Verdict()
}

// Write records a write by leader in term, and reports whether the
// resource accepted it.
func (r *ElectionResource) Write(leader string, term int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.v.Checked++
	op := r.v.Checked
	if r.mode == Fenced {
		if term <= 0 {
			r.v.add("write %d by %s with no term (%d)", op, leader, term)
			r.v.Rejected++
			return false
		}
		if term < r.last {
			r.v.Rejected++
			return false
		}
	}
	r.v.Accepted++
	if term < r.last {
		r.v.add("write %d by %s in term %d accepted after term %d (by %s): the term went back", op, leader, term, r.last, r.lastBy)
	}
	first, seen := r.leaderOf[term]
	switch {
	case !seen:
		r.leaderOf[term] = leader
		r.v.Terms++
	case first != leader && !r.reported[TermWrite{leader, term}]:
		r.reported[TermWrite{leader, term}] = true
		r.v.add("write %d: two leaders in term %d, %s and %s", op, term, first, leader)
	}
	if term >= r.last {
		r.last, r.lastBy = term, leader
	}
	return true
}

// Verdict judges the writes recorded so far.
func (r *ElectionResource) Verdict() ElectionVerdict {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := r.v
	v.Violations = append([]string(nil), r.v.Violations...)
	return v
}
