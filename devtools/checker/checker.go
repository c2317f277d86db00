// Package checker judges histories recorded while faults were injected, and
// counts what went wrong.
//
// Three judgments cover the lock's safety claims:
//   - Exclusion: no two holders of one key held it at the same time, judged
//     on one monotonic clock (every client in one process), from the moment
//     an acquire returned until the holder stopped using the lease.
//   - Fencing: the writes a resource accepted carry strictly increasing
//     fence tokens, so a late holder was never let through.
//   - Register linearizability (Linearizable, with LostUpdates beside it):
//     the claims and writes of one fenced read-modify-write register have a
//     linearization that obeys its fence rules, so no update was lost.
//
// Three model resources judge the primitives beyond the mutex, each in a
// fenced mode and an unfenced one (the negative control): a semaphore's
// (SemaphoreResource: at most its permits inside at once, a newer fence
// on a permit ending the older holder's turn), a read-write lock's
// (RWResource: no read overlapping a write) and an election's
// (ElectionResource: one leader per term, terms never going down).
//
// The checks of an order run (one order per idempotency key, no oversell,
// stock balance, one answer per request) are in package
// github.com/quorumlock/quorumlock/devtools/audit.
//
// Each check returns a Report that lists the violations it found. The tests
// of this package include negative controls: histories with a real violation
// that the checks must catch.
package checker

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Report is the verdict of one check.
type Report struct {
	// Checked counts the operations examined.
	Checked int
	// Violations describes each violation found, one line each.
	Violations []string
}

// OK reports whether no violation was found.
func (r Report) OK() bool { return len(r.Violations) == 0 }

// String summarises the report.
func (r Report) String() string {
	if r.OK() {
		return fmt.Sprintf("%d checked, no violations", r.Checked)
	}
	return fmt.Sprintf("%d checked, %d violations:\n  %s", r.Checked, len(r.Violations), strings.Join(r.Violations, "\n  "))
}

func (r *Report) add(format string, args ...any) {
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

// Hold is one lease as its holder saw it.
type Hold struct {
	Key    string
	Holder string
	Fence  int64
	// From is when the acquire returned; To is when the holder stopped
	// using the lease (it released it, or saw it lost or expire).
	From, To time.Time
}

// Holds records leases from many goroutines. The zero value is ready.
type Holds struct {
	mu    sync.Mutex
	holds []Hold
}

// Add records one hold.
func (h *Holds) Add(hold Hold) {
	h.mu.Lock()
	h.holds = append(h.holds, hold)
	h.mu.Unlock()
}

// All returns a copy of the holds recorded so far.
func (h *Holds) All() []Hold {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Hold(nil), h.holds...)
}

// Exclusion reports every pair of holds on one key, by different holders,
// whose intervals overlap. The times must come from one clock with its
// monotonic reading (time.Now in one process).
func Exclusion(holds []Hold) Report {
	r := Report{Checked: len(holds)}
	byKey := map[string][]Hold{}
	for _, h := range holds {
		if h.To.Before(h.From) {
			r.add("hold of %s by %s ends (%v) before it starts (%v)", h.Key, h.Holder, h.To, h.From)
			continue
		}
		byKey[h.Key] = append(byKey[h.Key], h)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		hs := byKey[k]
		sort.Slice(hs, func(i, j int) bool { return hs[i].From.Before(hs[j].From) })
		// Sweep: keep the hold that reaches furthest; any later hold that
		// starts before it ends overlaps it.
		longest := hs[0]
		for _, h := range hs[1:] {
			if h.From.Before(longest.To) && h.Holder != longest.Holder {
				r.add("key %s held by %s (fence %d) and %s (fence %d) at once for %v",
					k, longest.Holder, longest.Fence, h.Holder, h.Fence, minTime(longest.To, h.To).Sub(h.From))
			}
			if h.To.After(longest.To) {
				longest = h
			}
		}
	}
	return r
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Write is one write that a fenced resource accepted, in the order the
// resource committed them.
type Write struct {
	Resource string
	Fence    int64
	Writer   string
}

// Fencing reports every accepted write whose fence is not greater than the
// fence of the write the resource accepted before it.
func Fencing(accepted []Write) Report {
	r := Report{Checked: len(accepted)}
	last := map[string]Write{}
	for _, w := range accepted {
		if w.Fence <= 0 {
			r.add("%s accepted a write by %s with no fence (%d)", w.Resource, w.Writer, w.Fence)
			continue
		}
		if prev, ok := last[w.Resource]; ok && w.Fence <= prev.Fence {
			r.add("%s accepted fence %d from %s after fence %d from %s", w.Resource, w.Fence, w.Writer, prev.Fence, prev.Writer)
		}
		last[w.Resource] = w
	}
	return r
}
