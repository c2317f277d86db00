package checker

import (
	"fmt"
	"sync"
)

// Mode says whether a model resource checks fences.
type Mode int

// The modes of the model resources.
const (
	// Fenced: the resource accepts a write only when its fence is at
	// least the last one it accepted (on a semaphore, on the same permit);
	// a newer fence ends the older holder's time inside, since the
	// resource refuses it from then on.
	Fenced Mode = iota + 1
	// Unfenced: the resource accepts every write, and a holder stays
	// inside until it leaves. It is the negative control: a paused holder
	// that comes back after its lease ended is let in beside its successor.
	Unfenced
)

func (m Mode) String() string {
	switch m {
	case Fenced:
		return "fenced"
	case Unfenced:
		return "unfenced"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// SemKind is the kind of one operation on a semaphore-guarded resource.
type SemKind int

// The operations on a semaphore-guarded resource.
const (
	// SemEnter is a write by a permit's holder: it enters the resource,
	// or writes again while inside.
	SemEnter SemKind = iota + 1
	// SemExit is the holder leaving the resource (before it releases its
	// permit).
	SemExit
)

// SemOp is one operation on a semaphore-guarded resource, in the order the
// resource saw them.
type SemOp struct {
	Kind   SemKind
	Holder string
	// Slot names the permit (its lease's Key).
	Slot string
	// Fence is the permit's fence (SemEnter only).
	Fence int64
}

// SemaphoreVerdict is the verdict on a semaphore-guarded resource.
type SemaphoreVerdict struct {
	Report
	// Permits is the semaphore's number of permits.
	Permits int
	// MaxHolders is the largest number of holders inside at once, as
	// the resource accepted them (a holder on two permits counts twice).
	MaxHolders int
	// Accepted and Rejected count the writes.
	Accepted, Rejected int
	// Spans are the holders' times inside, in positions of the
	// resource's order of operations.
	Spans []Span
}

// slotState is what a fenced resource remembers of one permit.
type slotState struct {
	fence  int64
	holder string
}

// SemaphoreResource is a model resource guarded by a semaphore of Permits
// permits: each holder writes with its permit's key and fence, and the
// resource, in Fenced mode, refuses a write whose fence is below the last
// one it accepted on that permit. It records who was inside when, and its
// Verdict reports every moment more than Permits holders were inside, and
// every permit two holders were inside with at once. It is safe for
// concurrent use: its order of operations is the order its methods were
// called in.
type SemaphoreResource struct {
	mu       sync.Mutex
	permits  int
	mode     Mode
	pos      int64
	last     map[string]slotState      // by slot
	open     map[string]map[string]int // slot -> holder -> index in spans
	spans    []Span
	accepted int
	rejected int
	report   Report
}

// NewSemaphoreResource returns an empty resource for a semaphore of
// permits permits.
func NewSemaphoreResource(permits int, mode Mode) *SemaphoreResource {
	return &SemaphoreResource{
		permits: permits, mode: mode,
		last: map[string]slotState{}, open: map[string]map[string]int{},
	}
}

// CheckSemaphore judges a recorded history: ops in the order the resource
// saw them.
func CheckSemaphore(permits int, mode Mode, ops []SemOp) SemaphoreVerdict {
	r := NewSemaphoreResource(permits, mode)
	for _, op := range ops {
		switch op.Kind {
		case SemEnter:
			r.Enter(op.Slot, op.Fence, op.Holder)
		case SemExit:
			r.Exit(op.Slot, op.Holder)
		default:
			r.mu.Lock()
			r.report.add("operation %+v has no kind", op)
			r.mu.Unlock()
		}
	}
	return r.Verdict()
}

// Enter records a write by holder on the permit slot with its fence, and
// reports whether the resource accepted it. An accepted write lets the
// holder in (or keeps it in); a refused one changes nothing.
func (r *SemaphoreResource) Enter(slot string, fence int64, holder string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pos++
	if !r.admits(slot, fence, holder) {
		r.rejected++
		return false
	}
	r.accepted++
	inside := r.open[slot]
	if inside == nil {
		inside = map[string]int{}
		r.open[slot] = inside
	}
	if i, ok := inside[holder]; ok {
		r.spans[i].Fence = max(r.spans[i].Fence, fence)
		return true
	}
	for other, i := range inside {
		r.report.add("permit %s held inside by %s (fence %d) and %s (fence %d) at once, from op %d",
			slot, other, r.spans[i].Fence, holder, fence, r.pos)
	}
	inside[holder] = len(r.spans)
	r.spans = append(r.spans, Span{Holder: holder, Slot: slot, Fence: fence, From: r.pos, To: -1})
	return true
}

// admits applies the fence rule of a Fenced resource (an Unfenced one
// admits every write). A newer fence on a permit ends the time inside of
// every other holder of the permit: the resource refuses them from now on.
func (r *SemaphoreResource) admits(slot string, fence int64, holder string) bool {
	if r.mode != Fenced {
		return true
	}
	if fence <= 0 {
		r.report.add("write by %s on permit %s with no fence (%d) at op %d", holder, slot, fence, r.pos)
		return false
	}
	last, seen := r.last[slot]
	if seen && fence < last.fence {
		return false
	}
	if !seen || fence > last.fence {
		for other, i := range r.open[slot] {
			if other != holder {
				r.closeSpan(slot, other, i)
			}
		}
		r.last[slot] = slotState{fence: fence, holder: holder}
	}
	return true
}

// Exit records that holder left the resource; a holder the resource
// already shut out, or never let in, changes nothing.
func (r *SemaphoreResource) Exit(slot, holder string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pos++
	if i, ok := r.open[slot][holder]; ok {
		r.closeSpan(slot, holder, i)
	}
}

func (r *SemaphoreResource) closeSpan(slot, holder string, i int) {
	r.spans[i].To = r.pos
	delete(r.open[slot], holder)
}

// Verdict judges the operations recorded so far; holders still inside
// count as inside until after the last operation.
func (r *SemaphoreResource) Verdict() SemaphoreVerdict {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := SemaphoreVerdict{
		Report:   Report{Checked: int(r.pos), Violations: append([]string(nil), r.report.Violations...)},
		Permits:  r.permits,
		Accepted: r.accepted, Rejected: r.rejected,
		Spans: append([]Span(nil), r.spans...),
	}
	for i := range v.Spans {
		if v.Spans[i].To < 0 {
			v.Spans[i].To = r.pos + 1
		}
	}
	maxOpen, _, crowds := Crowds(v.Spans, r.permits)
	v.MaxHolders = maxOpen
	for _, c := range crowds {
		v.add("%d holders inside with %d permits: %v", len(c.Spans), r.permits, c)
	}
	return v
}
