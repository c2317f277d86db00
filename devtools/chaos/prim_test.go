package chaos

import (
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/devtools/checker"
)

func enter(h, slot string, f int64) logRow {
	return logRow{kind: logEnter, holder: h, slot: slot, fence: f}
}
func exit(h, slot string, f int64) logRow {
	return logRow{kind: logExit, holder: h, slot: slot, fence: f}
}

// pausedPermit: a holds permit p0 with fence 1 and is paused; b takes p0
// (fence 2) while c holds p1; a comes back and exits. The fenced resource
// refused a's exit, so it is not in the log.
var pausedPermit = []logRow{enter("a", "p0", 1), enter("c", "p1", 5), enter("b", "p0", 2), exit("b", "p0", 2), exit("c", "p1", 5)}

func TestCheckPrimSemaphore(t *testing.T) {
	rep := checkPrim(PrimSemaphore, true, pausedPermit)
	if rep.broken != 0 || rep.maxHolders != 2 || rep.accepted != 2 || !checker.Fencing(rep.stale).OK() {
		t.Fatalf("fenced: %+v", rep)
	}
	// Unfenced, a's exit was accepted too: three holders inside, a stale
	// write accepted.
	log := append(append([]logRow(nil), pausedPermit[:4]...), exit("a", "p0", 1), pausedPermit[4])
	rep = checkPrim(PrimSemaphore, false, log)
	if rep.broken == 0 || rep.maxHolders != 3 || checker.Fencing(rep.stale).OK() {
		t.Fatalf("unfenced: %+v", rep)
	}
	// A fenced resource that let a stale fence in is caught.
	rep = checkPrim(PrimSemaphore, true, []logRow{enter("b", "p0", 2), enter("a", "p0", 1)})
	if rep.broken == 0 || !strings.Contains(strings.Join(rep.violations, "\n"), "below the last") {
		t.Fatalf("stale enter: %+v", rep)
	}
}

func TestCheckPrimCounter(t *testing.T) {
	log := []logRow{enter("a", "t1", 0), enter("b", "t2", 0), enter("c", "t3", 0), exit("a", "t1", 0), exit("b", "t2", 0), exit("c", "t3", 0)}
	for _, fenced := range []bool{true, false} {
		rep := checkPrim(PrimCounter, fenced, log)
		if rep.maxHolders != 3 || rep.broken != 1 || rep.stale != nil {
			t.Fatalf("fenced=%v: %+v", fenced, rep)
		}
	}
}

func TestCheckPrimRWLock(t *testing.T) {
	row := func(kind, h string, f int64) logRow { return logRow{kind: kind, holder: h, slot: primName, fence: f} }
	clean := []logRow{row(logWriteBegin, "w1", 1), row(logWriteEnd, "w1", 1), row(logReadBegin, "r", 0), row(logReadEnd, "r", 0),
		row(logWriteBegin, "w2", 2), row(logWriteEnd, "w2", 2)}
	if rep := checkPrim(PrimRWLock, true, clean); rep.broken != 0 || rep.accepted != 2 || !checker.Fencing(rep.stale).OK() {
		t.Fatalf("clean: %+v", rep)
	}
	// A paused writer that came back (unfenced) during a read, after a
	// newer writer.
	late := append(clean, row(logReadBegin, "r2", 0), row(logWriteBegin, "w1", 1), row(logWriteEnd, "w1", 1), row(logReadEnd, "r2", 0))
	rep := checkPrim(PrimRWLock, false, late)
	if rep.broken == 0 || checker.Fencing(rep.stale).OK() {
		t.Fatalf("late writer: %+v", rep)
	}
}

func TestCheckPrimElection(t *testing.T) {
	row := func(h string, term int64) logRow {
		return logRow{kind: logTerm, holder: h, slot: primName, fence: term}
	}
	if rep := checkPrim(PrimElection, true, []logRow{row("a", 1), row("a", 1), row("b", 2), row("b", 2)}); rep.broken != 0 || rep.accepted != 4 {
		t.Fatalf("clean: %+v", rep)
	}
	rep := checkPrim(PrimElection, false, []logRow{row("a", 1), row("b", 2), row("a", 1), row("c", 2)})
	if rep.broken != 2 {
		t.Fatalf("a term going back and two leaders in a term: %+v", rep)
	}
}

func TestPrimVerdict(t *testing.T) {
	ok := Result{Accepted: 10, Rejected: 2, Injected: 2, Linearizable: "-", MaxHolders: 2}
	plain := Result{Accepted: 10, Broken: 3, StaleAccepted: 1, Injected: 2, Linearizable: "-", MaxHolders: 3}
	sem := Scenario{Name: "semaphore", Prim: PrimSemaphore, Staged: true, drive: quiet(0)}
	if v := Verdict(Pair{Scenario: sem, Fenced: ok, Plain: plain}); len(v) != 0 {
		t.Fatalf("a good pair failed: %v", v)
	}
	within := plain
	within.MaxHolders = 2
	if v := Verdict(Pair{Scenario: sem, Fenced: ok, Plain: within}); len(v) != 1 {
		t.Fatalf("an unfenced run within the permits passed: %v", v)
	}
	if v := Verdict(Pair{Scenario: sem, Fenced: ok, Plain: Result{Accepted: 10, Injected: 2}}); len(v) != 2 {
		t.Fatalf("an unfenced run that broke nothing: %v", v)
	}
	broken := ok
	broken.Broken, broken.Violations = 1, []string{"x"}
	if v := Verdict(Pair{Scenario: sem, Fenced: broken, Plain: plain}); len(v) != 1 {
		t.Fatalf("a broken fenced run passed: %v", v)
	}
	ctr := Scenario{Name: "semaphore-countersem", Prim: PrimCounter, drive: quiet(0)}
	if v := Verdict(Pair{Scenario: ctr, Fenced: plain, Plain: plain}); len(v) != 0 {
		t.Fatalf("an over-admitting counter semaphore failed: %v", v)
	}
	if v := Verdict(Pair{Scenario: ctr, Fenced: plain, Plain: within}); len(v) != 1 {
		t.Fatalf("a counter semaphore within its permits passed: %v", v)
	}
}

func TestPrimTally(t *testing.T) {
	ev := []Event{
		{Worker: 0, Round: 0, Op: OpLock, Phase: PhaseCall, At: 1},
		{Worker: 0, Round: 0, Op: OpLock, Phase: PhaseReturn, At: 10, Result: ResultOK, Keys: []string{"p0"}, Fences: []int64{1}, Until: 100},
		{Worker: 1, Round: 0, Op: OpLock, Phase: PhaseReturn, At: 20, Result: ResultOK, Key: "read", Until: 100},
		{Worker: 2, Round: 0, Op: OpLock, Phase: PhaseReturn, At: 30, Result: ResultOK, Keys: []string{"p0"}, Fences: []int64{2}, Until: 100},
		{Worker: 0, Round: 0, Op: OpWrite, Phase: PhaseReturn, At: 40, Result: ResultStale},
		{Worker: 2, Round: 0, Op: OpWrite, Phase: PhaseReturn, At: 41, Result: ResultError},
		{Worker: 0, Round: 0, Op: OpUnlock, Phase: PhaseCall, At: 50},
		{Worker: 2, Round: 0, Op: OpUnlock, Phase: PhaseCall, At: 60},
	}
	tl, holds := primTally(ev)
	if tl.attempts != 1 || tl.locks != 3 || tl.rejected != 1 || tl.errors != 1 || len(holds) != 2 {
		t.Fatalf("tally %+v, holds %+v", tl, holds)
	}
	if n := len(checker.Exclusion(holds).Violations); n != 1 {
		t.Fatalf("%d overlaps, want the two holders of p0", n)
	}
}
