package main

import (
	"testing"
	"time"
)

// TestTallyWindow: every 201 and uncertain request of the run is kept for
// the check; only those within the window are counted and timed.
func TestTallyWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	w := window{start: t0, end: t0.Add(time.Second)}
	if !w.contains(t0, t0.Add(time.Second)) || w.contains(t0.Add(-time.Nanosecond), t0) || w.contains(t0, t0.Add(time.Second+1)) {
		t.Fatal("window bounds")
	}
	var tl tally
	tl.record(0, answer{kind: kindCreated}, false, time.Millisecond) // warm-up
	tl.record(1, answer{kind: kindCreated}, true, 3*time.Millisecond)
	tl.record(2, noAnswer(true, false), true, 2*time.Second)
	tl.record(3, classify(503, "service_unavailable", true), true, time.Millisecond)
	tl.record(4, classify(500, "internal_error", false), true, time.Millisecond)
	tl.record(5, noAnswer(true, false), false, 2*time.Second) // after the window
	if tl.sent != 6 || tl.counts != [numKinds]int{1, 0, 1, 0, 1, 1} || len(tl.latencies) != 1 || tl.latencies[0] != 3*time.Millisecond ||
		tl.others["500 internal_error"] != 1 {
		t.Fatalf("tally %+v", tl)
	}
	if len(tl.created) != 2 || len(tl.uncertain) != 3 {
		t.Fatalf("created %v uncertain %v", tl.created, tl.uncertain)
	}
}
