package checker

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Span is one holder's time inside a resource, the half-open interval
// [From, To) on one clock: positions in the resource's order of operations
// (what the Resource types record) or nanoseconds of one monotonic clock.
// A span that ends when another starts does not overlap it.
type Span struct {
	Holder string
	// Slot is the permit (a semaphore's permit key) the holder held.
	Slot  string
	Fence int64
	From  int64
	To    int64
}

func (s Span) String() string {
	return fmt.Sprintf("%s on %s (fence %d) [%d, %d)", s.Holder, s.Slot, s.Fence, s.From, s.To)
}

// Crowd is a moment when more spans were open than a limit allowed: the
// peak of one excursion above the limit.
type Crowd struct {
	// At is when the peak began.
	At int64
	// Spans are the spans open at the peak, in the order they began.
	Spans []Span
}

func (c Crowd) String() string {
	parts := make([]string, len(c.Spans))
	for i, s := range c.Spans {
		parts[i] = s.String()
	}
	return fmt.Sprintf("%d at once at %d: %s", len(c.Spans), c.At, strings.Join(parts, ", "))
}

// MaxOverlap returns the largest number of spans open at one time and the
// time it was first reached (0, 0 for no spans). Empty spans (To <= From)
// count for nothing.
func MaxOverlap(spans []Span) (n int, at int64) {
	n, at, _ = sweep(spans, -1)
	return n, at
}

// Crowds returns MaxOverlap's figures and every excursion above limit: each
// time the number of open spans rises above limit, the Crowd at the peak
// of that excursion (until it falls back to limit or below).
func Crowds(spans []Span, limit int) (maxOpen int, at int64, crowds []Crowd) {
	return sweep(spans, limit)
}

// edge is where a span begins or ends.
type edge struct {
	t     int64
	end   bool
	index int
}

// sweep walks the times where spans begin or end, in order, and counts the
// spans open from each of them on (the spans are half-open: one that ends
// where another begins does not overlap it). With limit >= 0 it records
// the peak of each excursion above limit.
func sweep(spans []Span, limit int) (maxOpen int, at int64, crowds []Crowd) {
	edges := make([]edge, 0, 2*len(spans))
	for i, s := range spans {
		if s.To > s.From {
			edges = append(edges, edge{s.From, false, i}, edge{s.To, true, i})
		}
	}
	slices.SortFunc(edges, func(a, b edge) int { return cmp.Compare(a.t, b.t) })
	open := map[int]bool{}
	var peak *Crowd
	for i := 0; i < len(edges); {
		t := edges[i].t
		for ; i < len(edges) && edges[i].t == t; i++ {
			if edges[i].end {
				delete(open, edges[i].index)
			} else {
				open[edges[i].index] = true
			}
		}
		if len(open) > maxOpen {
			maxOpen, at = len(open), t
		}
		switch {
		case limit < 0:
		case len(open) <= limit && peak != nil:
			crowds, peak = append(crowds, *peak), nil
		case len(open) > limit && (peak == nil || len(open) > len(peak.Spans)):
			peak = &Crowd{At: t, Spans: openSpans(spans, open)}
		}
	}
	return maxOpen, at, crowds
}

// openSpans returns the spans whose indexes are in open, by start.
func openSpans(spans []Span, open map[int]bool) []Span {
	out := make([]Span, 0, len(open))
	for i := range open {
		out = append(out, spans[i])
	}
	slices.SortFunc(out, func(a, b Span) int {
		return cmp.Or(cmp.Compare(a.From, b.From), cmp.Compare(a.Holder, b.Holder), cmp.Compare(a.Slot, b.Slot))
	})
	return out
}
