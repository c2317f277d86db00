package main

import "time"

// window is the measured part of the load: a request counts when it was
// sent at or after start and answered at or before end.
type window struct {
	start, end time.Time
}

// contains reports whether a request sent at t0 and answered at t1 is
// measured.
func (w window) contains(t0, t1 time.Time) bool {
	return !t0.Before(w.start) && !t1.After(w.end)
}

// tally is what one client saw.
type tally struct {
	// counts are the answers within the window by kind; latencies those
	// of its 201s; others its kindOther answers by label.
	counts    [numKinds]int
	latencies []time.Duration
	others    map[string]int
	// sent counts every request of the run, warm-up included.
	sent int
	// created are the request numbers of every 201 of the run, uncertain
	// those whose outcome the client could not learn.
	created, uncertain []int
	firstError         string
}

// record counts request n's answer a, answered after d; in says whether
// it is in the window.
func (t *tally) record(n int, a answer, in bool, d time.Duration) {
	t.sent++
	switch {
	case a.kind == kindCreated:
		t.created = append(t.created, n)
	case a.uncertain:
		t.uncertain = append(t.uncertain, n)
	}
	if !in {
		return
	}
	t.counts[a.kind]++
	switch a.kind {
	case kindCreated:
		t.latencies = append(t.latencies, d)
	case kindOther:
		if t.others == nil {
			t.others = map[string]int{}
		}
		t.others[a.label]++
	}
}
