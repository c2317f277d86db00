package chaos

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/integration/checker"
)

func TestDigest(t *testing.T) {
	ev := []Event{
		{Worker: 0, Round: 0, Op: OpLock, Phase: PhaseCall, At: 1},
		{Worker: 0, Round: 0, Op: OpLock, Phase: PhaseReturn, At: 10, Result: ResultOK, Fence: 1, Until: 100},
		{Worker: 0, Round: 0, Op: OpRead, Phase: PhaseCall, At: 11, Fence: 1},
		{Worker: 0, Round: 0, Op: OpRead, Phase: PhaseReturn, At: 12, Fence: 1, Value: 10, Result: ResultOK},
		{Worker: 0, Round: 0, Op: OpWrite, Phase: PhaseCall, At: 13, Fence: 1, Value: 9},
		{Worker: 0, Round: 0, Op: OpWrite, Phase: PhaseReturn, At: 14, Fence: 1, Value: 9, Result: ResultOK},
		{Worker: 0, Round: 0, Op: OpUnlock, Phase: PhaseCall, At: 15, Fence: 1},
		// Worker 1 was paused past its validity: its hold ends at Until.
		{Worker: 1, Round: 0, Op: OpLock, Phase: PhaseReturn, At: 20, Result: ResultOK, Fence: 2, Until: 30},
		{Worker: 1, Round: 0, Op: OpWrite, Phase: PhaseCall, At: 40, Fence: 2, Value: 5},
		{Worker: 1, Round: 0, Op: OpWrite, Phase: PhaseReturn, At: 41, Fence: 2, Value: 5, Result: ResultStale},
		{Worker: 1, Round: 0, Op: OpUnlock, Phase: PhaseCall, At: 42, Fence: 2},
		// Worker 2 was killed during its write.
		{Worker: 2, Round: 3, Op: OpLock, Phase: PhaseCall, At: 50},
		{Worker: 2, Round: 3, Op: OpLock, Phase: PhaseReturn, At: 51, Result: ResultError},
		{Worker: 2, Round: 4, Op: OpWrite, Phase: PhaseCall, At: 60, Fence: 3, Value: 7},
	}
	holds, ops, tl := digest(ev)
	if tl.attempts != 2 || tl.locks != 2 || tl.written != 1 || tl.rejected != 1 || tl.errors != 0 {
		t.Fatalf("tally %+v", tl)
	}
	if len(holds) != 2 || holds[0].To.UnixNano() != 15 || holds[1].To.UnixNano() != 30 {
		t.Fatalf("holds %+v", holds)
	}
	if len(ops) != 4 {
		t.Fatalf("ops %+v", ops)
	}
	last := ops[3]
	if last.Kind != checker.OpWrite || last.Outcome != checker.Unknown || last.Return != 0 || last.Fence != 3 {
		t.Fatalf("the killed write: %+v", last)
	}
	if ops[2].Outcome != checker.Rejected || ops[0].Kind != checker.OpClaim || ops[0].Value != 10 {
		t.Fatalf("ops %+v", ops)
	}
}

func TestVerdict(t *testing.T) {
	ok := Result{Accepted: 10, Rejected: 2, Injected: 2, Linearizable: "yes"}
	plain := Result{Accepted: 10, Lost: 2, StaleAccepted: 2, Injected: 2, Linearizable: "-"}
	staged := Scenario{Name: "s", Staged: true, DoubleGrant: yes(), drive: quiet(0)}
	if v := Verdict(Pair{staged, ok, withOverlaps(plain, 1)}); len(v) != 0 {
		t.Fatalf("a good pair failed: %v", v)
	}
	// Negative controls: each must be caught.
	bad := map[string]Pair{
		"fenced run lost an update":       {staged, withViolation(ok), withOverlaps(plain, 1)},
		"negative control caught nothing": {staged, ok, withOverlaps(Result{Accepted: 10, Injected: 2}, 1)},
		"no stale write rejected":         {staged, Result{Accepted: 10, Injected: 2}, withOverlaps(plain, 1)},
		"no double grant":                 {staged, ok, plain},
		"double grant with guard":         {Scenario{Name: "g", DoubleGrant: no(), drive: quiet(0)}, ok, withOverlaps(plain, 1)},
		"no progress":                     {Scenario{Name: "p", drive: quiet(0)}, Result{Injected: 1}, plain},
		"no fault":                        {Scenario{Name: "f", drive: quiet(0)}, Result{Accepted: 3}, plain},
	}
	for name, p := range bad {
		if v := Verdict(p); len(v) == 0 {
			t.Errorf("%s: not caught", name)
		}
	}
}

func withViolation(r Result) Result {
	r.Lost = 1
	r.Violations = []string{"1 lost updates"}
	return r
}

func withOverlaps(r Result, n int) Result { r.Overlaps = n; return r }

func TestViolationCount(t *testing.T) {
	r := Result{Lost: 3, StaleAccepted: 2, Linearizable: "no"}
	if got := r.ViolationCount(); got != 6 {
		t.Fatalf("ViolationCount = %d, want 6", got)
	}
}

func TestGate(t *testing.T) {
	g := newGate()
	ctx := context.Background()
	if !g.wait(ctx) {
		t.Fatal("an open gate held the worker")
	}
	g.set(true)
	done := make(chan bool)
	go func() { done <- g.wait(ctx) }()
	select {
	case <-done:
		t.Fatal("a closed gate let the worker through")
	case <-time.After(50 * time.Millisecond):
	}
	g.set(true) // closing twice changes nothing
	g.set(false)
	if !<-done {
		t.Fatal("the reopened gate did not let the worker through")
	}
	g.set(true)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if g.wait(cctx) {
		t.Fatal("a cancelled wait reported an open gate")
	}
}

func TestScenariosAreWellFormed(t *testing.T) {
	seen := map[string]bool{}
	short := 0
	for _, sc := range Scenarios() {
		if sc.Name == "" || seen[sc.Name] || sc.drive == nil || sc.TTL <= 0 || sc.Rounds <= 0 || sc.Faults == "" {
			t.Errorf("scenario %+v", sc)
		}
		seen[sc.Name] = true
		if sc.Short {
			short++
		}
		if strings.ContainsAny(Anchor(sc.Name), "/= ") {
			t.Errorf("anchor %q", Anchor(sc.Name))
		}
	}
	if short == 0 {
		t.Error("no scenario in the short suite")
	}
}
