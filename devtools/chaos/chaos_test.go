package chaos

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/devtools/checker"
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
	holds, byKey, tl := digest(ev)
	if tl.attempts != 2 || tl.locks != 2 || tl.written != 1 || tl.rejected != 1 || tl.errors != 0 {
		t.Fatalf("tally %+v", tl)
	}
	if len(holds) != 2 || holds[0].To.UnixNano() != 15 || holds[1].To.UnixNano() != 30 || holds[0].Key != LockKey {
		t.Fatalf("holds %+v", holds)
	}
	ops := byKey[LockKey]
	if len(ops) != 4 || len(byKey) != 1 {
		t.Fatalf("ops %+v", byKey)
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
	if v := Verdict(Pair{Scenario: staged, Fenced: ok, Plain: withOverlaps(plain, 1)}); len(v) != 0 {
		t.Fatalf("a good pair failed: %v", v)
	}
	carts := Scenario{Name: "c", Carts: true, Staged: true, DoubleGrant: no(), drive: quiet(0)}
	if v := Verdict(Pair{Scenario: carts, Fenced: ok, Plain: withTorn(plain, 1)}); len(v) != 0 {
		t.Fatalf("a good cart pair failed: %v", v)
	}
	// Negative controls: each must be caught.
	bad := map[string]Pair{
		"fenced run lost an update":       {Scenario: staged, Fenced: withViolation(ok), Plain: withOverlaps(plain, 1)},
		"negative control caught nothing": {Scenario: staged, Fenced: ok, Plain: withOverlaps(Result{Accepted: 10, Injected: 2}, 1)},
		"no stale write rejected":         {Scenario: staged, Fenced: Result{Accepted: 10, Injected: 2}, Plain: withOverlaps(plain, 1)},
		"no double grant":                 {Scenario: staged, Fenced: ok, Plain: plain},
		"double grant with guard":         {Scenario: Scenario{Name: "g", DoubleGrant: no(), drive: quiet(0)}, Fenced: ok, Plain: withOverlaps(plain, 1)},
		"no progress":                     {Scenario: Scenario{Name: "p", drive: quiet(0)}, Fenced: Result{Injected: 1}, Plain: plain},
		"no fault":                        {Scenario: Scenario{Name: "f", drive: quiet(0)}, Fenced: Result{Accepted: 3}, Plain: plain},
		"cart check caught nothing":       {Scenario: carts, Fenced: ok, Plain: withTorn(plain, 0)},
		"cart lost nothing":               {Scenario: carts, Fenced: ok, Plain: withTorn(Result{Accepted: 10, Injected: 2}, 1)},
		"fenced cart torn":                {Scenario: carts, Fenced: withTorn(ok, 1), Plain: withTorn(plain, 1)},
	}
	for name, p := range bad {
		if v := Verdict(p); len(v) == 0 {
			t.Errorf("%s: not caught", name)
		}
	}
	if v := Verdict(Pair{Scenario: Scenario{Name: "n", NA: "does not apply"}}); len(v) != 0 {
		t.Errorf("a row that does not apply, and has no runs, failed: %v", v)
	}
}

func withViolation(r Result) Result {
	r.Lost = 1
	r.Violations = []string{"1 lost updates"}
	return r
}

func withOverlaps(r Result, n int) Result { r.Overlaps = n; return r }

// withTorn gives r n torn carts; torn carts are violations.
func withTorn(r Result, n int) Result {
	r.Torn = n
	if n > 0 {
		r.Violations = append(slices.Clone(r.Violations), "cart 1/2 not applied whole")
	}
	return r
}

func TestViolationCount(t *testing.T) {
	r := Result{Lost: 3, StaleAccepted: 2, Linearizable: "no"}
	if got := r.ViolationCount(); got != 6 {
		t.Fatalf("ViolationCount = %d, want 6", got)
	}
	if got := withTorn(r, 2).ViolationCount(); got != 8 {
		t.Fatalf("ViolationCount with 2 torn carts = %d, want 8", got)
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
	locks := map[string][]string{}
	short := map[string][]string{}
	for _, sc := range Scenarios() {
		runs := sc.drive != nil && sc.TTL > 0 && sc.Rounds > 0 && sc.Faults != ""
		if sc.Name == "" || seen[sc.ID()] || !slices.Contains(Locks, sc.Lock) || (sc.NA == "") != runs {
			t.Errorf("scenario %+v", sc)
		}
		seen[sc.ID()] = true
		locks[sc.Name] = append(locks[sc.Name], sc.Lock)
		if sc.Short {
			short[sc.Lock] = append(short[sc.Lock], sc.Name)
		}
		if sc.NA != "" && sc.Short {
			t.Errorf("%s does not apply but is in the short suite", sc.ID())
		}
		if sc.Lock == LockEtcd && sc.NA == "" && sc.TTL%time.Second != 0 {
			t.Errorf("%s: etcd counts TTLs in whole seconds, not %v", sc.ID(), sc.TTL)
		}
		if strings.ContainsAny(Anchor(sc.Name), "/= ") {
			t.Errorf("anchor %q", Anchor(sc.Name))
		}
	}
	for name, l := range locks {
		if !slices.Equal(l, Locks) {
			t.Errorf("%s is on %v, want a row on each lock, in the order %v", name, l, Locks)
		}
	}
	for _, l := range Locks {
		if len(short[l]) == 0 {
			t.Errorf("no scenario of %s in the short suite", l)
		}
	}
	// etcdlock's short rows: a client fault and a member fault.
	if !slices.Contains(short[LockEtcd], "client-pause") || !slices.Contains(short[LockEtcd], "node-pause") {
		t.Errorf("etcdlock's short rows %v", short[LockEtcd])
	}
}

// TestDigestUntilMoves: the holder's latest view of the validity end (an
// etcd session's keep-alive moves it on) bounds its hold, so a lease held
// past its first Until still overlaps one granted after it.
func TestDigestUntilMoves(t *testing.T) {
	ev := []Event{
		{Worker: 0, Round: 0, Op: OpLock, Phase: PhaseReturn, At: 10, Result: ResultOK, Fence: 1, Until: 30},
		{Worker: 0, Round: 0, Op: OpHold, Phase: PhaseCall, At: 12, Fence: 1, Until: 40},
		{Worker: 1, Round: 0, Op: OpLock, Phase: PhaseReturn, At: 35, Result: ResultOK, Fence: 2, Until: 60},
		{Worker: 0, Round: 0, Op: OpUnlock, Phase: PhaseCall, At: 45, Fence: 1, Until: 50},
		{Worker: 1, Round: 0, Op: OpUnlock, Phase: PhaseCall, At: 55, Fence: 2, Until: 60},
	}
	holds, _, _ := digest(ev)
	if len(holds) != 2 || holds[0].To.UnixNano() != 45 || holds[1].To.UnixNano() != 55 {
		t.Fatalf("holds %+v", holds)
	}
	if n := len(checker.Exclusion(holds).Violations); n != 1 {
		t.Fatalf("%d overlaps, want the one of the lease held to 45 with the one granted at 35", n)
	}
}

// The table tallies every row over its runs: three seeds of client-pause
// on both locks, one etcdlock run of which granted the key twice, and a row
// that does not apply.
func TestWriteMarkdown(t *testing.T) {
	var pairs []Pair
	for seed := uint64(11); seed <= 13; seed++ {
		for _, sc := range Scenarios() {
			if sc.Name != "client-pause" && sc.Name != clockJumpMonotonic || sc.NA != "" && seed > 11 {
				continue
			}
			p := Pair{Scenario: sc, Seed: seed}
			if sc.NA == "" {
				p.Fenced = Result{Accepted: 10, Rejected: 2, Injected: 3, Linearizable: "yes"}
				p.Plain = Result{Accepted: 10, Lost: 2, Injected: 3, Linearizable: "-"}
			}
			if sc.Lock == LockEtcd && sc.Name == "client-pause" && seed == 12 {
				p.Fenced.Overlaps = 1
			}
			pairs = append(pairs, p)
		}
	}
	var b strings.Builder
	if err := WriteMarkdown(&b, pairs, "# head\n"); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| scenario | quorum: with fencing | quorum: without fencing | etcdlock: with fencing | etcdlock: without fencing | verdicts |",
		`| <a id="client-pause"></a>client-pause | **0 violations in 3 of 3 runs** (lost 0, stale accepted 0, linearizable in 3 of 3); 6 stale writes rejected; 0 double grants in 3 of 3 runs | **violations in 3 of 3 runs (2, 2, 2)** (lost 6, stale accepted 0); 0 double grants in 3 of 3 runs |`,
		"6 stale writes rejected; double grants in 1 of 3 runs (0, 1, 0) |",
		"quorum: pass in 3 of 3 runs; etcdlock: FAIL in 1 of 3 runs: seed 12: 1 double grants where the lock must grant the key once |",
		`| <a id="clock-jump-monotonic"></a>clock-jump-monotonic | n/a | n/a |`,
		`| <a id="client-pause-etcdlock"></a>client-pause | etcdlock |`,
		"| 3 runs (seeds 11 to 13); 18 faults; 0 + 0 leases; 30 + 30 writes accepted, 6 + 0 rejected |",
		"`go run ./devtools/cmd/chaos -only client-pause -lock quorum -seed 11 -repeat 3` (pass in 3 of 3 runs)",
		"| **n/a on quorum**: the bed moves no Redis",
		// The etcd monotonic row is staged and must double grant: the
		// results above do not, and its verdict says so.
		"etcdlock: FAIL in 3 of 3 runs: seed 11: no double grant",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
	if rows := Rows(pairs); len(rows) != 4 || len(rows[0].Pairs) != 3 || len(rows[2].Pairs) != 1 {
		t.Errorf("rows: %d, first with %d runs", len(rows), len(rows[0].Pairs))
	}
}

// cartEvents is one cart round of worker w: a lease on p1 and p3, both
// rows read, the cart written with the given answers (p1's, p3's).
func cartEvents(w, n int, at int64, f1, f3 int64, r1, r3 string) []Event {
	k1, k3 := CartKey("p1"), CartKey("p3")
	keys, fences := []string{k1, k3}, []int64{f1, f3}
	return []Event{
		{Worker: w, Round: n, Op: OpLock, Phase: PhaseCall, At: at, Keys: []string{k3, k1}},
		{Worker: w, Round: n, Op: OpLock, Phase: PhaseReturn, At: at + 1, Result: ResultOK, Keys: keys, Fences: fences, Until: at + 100},
		{Worker: w, Round: n, Op: OpRead, Phase: PhaseCall, At: at + 2, Key: k1, Fence: f1},
		{Worker: w, Round: n, Op: OpRead, Phase: PhaseReturn, At: at + 3, Key: k1, Fence: f1, Value: 10, Result: ResultOK},
		{Worker: w, Round: n, Op: OpRead, Phase: PhaseCall, At: at + 4, Key: k3, Fence: f3},
		{Worker: w, Round: n, Op: OpRead, Phase: PhaseReturn, At: at + 5, Key: k3, Fence: f3, Value: 20, Result: ResultOK},
		{Worker: w, Round: n, Op: OpHold, Phase: PhaseCall, At: at + 6, Keys: keys, Fences: fences, Until: at + 100},
		{Worker: w, Round: n, Op: OpWrite, Phase: PhaseCall, At: at + 7, Key: k1, Fence: f1, Value: 9},
		{Worker: w, Round: n, Op: OpWrite, Phase: PhaseCall, At: at + 7, Key: k3, Fence: f3, Value: 18},
		{Worker: w, Round: n, Op: OpWrite, Phase: PhaseReturn, At: at + 8, Key: k1, Fence: f1, Value: 9, Result: r1},
		{Worker: w, Round: n, Op: OpWrite, Phase: PhaseReturn, At: at + 8, Key: k3, Fence: f3, Value: 18, Result: r3},
		{Worker: w, Round: n, Op: OpUnlock, Phase: PhaseCall, At: at + 9, Keys: keys, Fences: fences},
	}
}

func TestDigestCarts(t *testing.T) {
	var ev []Event
	ev = append(ev, cartEvents(0, 0, 0, 1, 1, ResultOK, ResultOK)...)
	// Rolled back at p3 by the fence: p1's write had no effect.
	ev = append(ev, cartEvents(1, 0, 20, 2, 2, ResultAborted, ResultStale)...)
	// Refused for stock at p3: neither write had an effect.
	ev = append(ev, cartEvents(2, 0, 40, 3, 3, ResultAborted, ResultRefused)...)
	// The commit failed: both outcomes unknown.
	ev = append(ev, cartEvents(3, 0, 60, 4, 4, ResultError, ResultError)...)
	holds, byKey, tl := digest(ev)
	if tl.attempts != 4 || tl.locks != 4 || tl.written != 1 || tl.rejected != 1 || tl.refused != 1 || tl.errors != 1 {
		t.Fatalf("tally %+v: every cart counts once", tl)
	}
	if len(holds) != 8 || holds[0].Key != CartKey("p1") || holds[1].Key != CartKey("p3") || holds[1].Fence != 1 || holds[1].To.UnixNano() != 9 {
		t.Fatalf("holds %+v: one per key of each lease", holds)
	}
	for _, k := range []string{CartKey("p1"), CartKey("p3")} {
		var claims, writes int
		for _, op := range byKey[k] {
			if op.Kind == checker.OpClaim {
				claims++
			} else {
				writes++
			}
		}
		// p1: the committed and the unknown write; p3 also the stale one.
		if want := map[string]int{CartKey("p1"): 2, CartKey("p3"): 3}[k]; claims != 4 || writes != want {
			t.Errorf("%s: %d claims and %d writes, want 4 and %d: %+v", k, claims, writes, want, byKey[k])
		}
	}
	if lin := checker.Linearizable(10, byKey[CartKey("p1")][:2], time.Second); len(byKey) != 2 || !lin.OK() {
		t.Fatalf("keys %d, p1's first claim and write: %v", len(byKey), lin)
	}
}

func TestWroteOver(t *testing.T) {
	hold := Event{Worker: 1, Op: OpHold, Keys: []string{CartKey("p1"), CartKey("p2")}, Fences: []int64{5, 7}}
	over := wroteOver(hold)
	w := func(worker int, key string, fence int64, r string) Event {
		return Event{Worker: worker, Op: OpWrite, Phase: PhaseReturn, Key: CartKey(key), Fence: fence, Result: r}
	}
	for _, c := range []struct {
		e    Event
		want bool
	}{
		{w(2, "p2", 8, ResultOK), true},
		{w(2, "p1", 6, ResultOK), true},
		{w(2, "p2", 7, ResultOK), false},      // not newer than the hold's fence of p2
		{w(2, "p3", 99, ResultOK), false},     // not a product of the cart
		{w(2, "p2", 8, ResultAborted), false}, // rolled back: overwrote nothing
		{w(1, "p2", 8, ResultOK), false},      // its own
	} {
		if got := over(c.e); got != c.want {
			t.Errorf("wroteOver(%+v) = %v, want %v", c.e, got, c.want)
		}
	}
	single := wroteOver(Event{Worker: 1, Op: OpHold, Fence: 5})
	if !single(Event{Worker: 2, Op: OpWrite, Phase: PhaseReturn, Fence: 6}) || single(Event{Worker: 2, Op: OpWrite, Phase: PhaseReturn, Fence: 5}) {
		t.Error("single-key wroteOver")
	}
}

// TestCartCheck: a clean ledger passes, and each kind of broken cart is
// caught (the check's negative controls).
func TestCartCheck(t *testing.T) {
	initial := map[string]int64{"p1": 10, "p2": 10, "p3": 5}
	carts := []cartRow{{id: "0/0", products: []string{"p1", "p2"}, units: []int64{2, 1}}, {id: "1/0", products: []string{"p2", "p3"}, units: []int64{3, 1}}}
	lines := []cartLine{
		{cart: "0/0", product: "p1", fence: 1, units: 2, before: 10, after: 8},
		{cart: "0/0", product: "p2", fence: 1, units: 1, before: 10, after: 9},
		{cart: "1/0", product: "p2", fence: 2, units: 3, before: 9, after: 6},
		{cart: "1/0", product: "p3", fence: 1, units: 1, before: 5, after: 4},
	}
	final := map[string]int64{"p1": 8, "p2": 6, "p3": 4}
	if rep := checkCarts(initial, final, carts, lines); len(rep.violations) != 0 || rep.lost != 0 || rep.torn != 0 {
		t.Fatalf("a clean ledger: %+v", rep)
	}
	with := func(f func(fin map[string]int64, c []cartRow, l []cartLine) ([]cartRow, []cartLine)) cartReport {
		fin := maps.Clone(final)
		c, l := f(fin, slices.Clone(carts), slices.Clone(lines))
		return checkCarts(initial, fin, c, l)
	}
	bad := map[string]struct {
		rep        cartReport
		lost, torn int
	}{
		// Cart 1/0 wrote p2 from a stale read (10 - 3): 0/0's unit is lost.
		"late write": {with(func(fin map[string]int64, c []cartRow, l []cartLine) ([]cartRow, []cartLine) {
			l[2].after, fin["p2"] = 7, 7
			return c, l
		}), 1, 1},
		// Cart 1/0 committed but p3 was never written.
		"torn cart": {with(func(fin map[string]int64, c []cartRow, l []cartLine) ([]cartRow, []cartLine) {
			fin["p3"] = 5
			return c, l[:3]
		}), 1, 1},
		// Cart 1/0 did not commit, but its p2 line and decrement did.
		"uncommitted cart": {with(func(fin map[string]int64, c []cartRow, l []cartLine) ([]cartRow, []cartLine) {
			fin["p3"] = 5
			return c[:1], l[:3]
		}), 3, 1},
		// The stock moved with no cart to account for it.
		"stray decrement": {with(func(fin map[string]int64, c []cartRow, l []cartLine) ([]cartRow, []cartLine) {
			fin["p1"] = 7
			return c, l
		}), 1, 0},
		// A line took other units than its cart names.
		"wrong units": {with(func(fin map[string]int64, c []cartRow, l []cartLine) ([]cartRow, []cartLine) {
			l[3].units, l[3].after, fin["p3"] = 2, 3, 3
			return c, l
		}), 1, 1},
	}
	for name, b := range bad {
		if len(b.rep.violations) == 0 || b.rep.lost != int64(b.lost) || b.rep.torn != b.torn {
			t.Errorf("%s: %+v, want %d units lost and %d torn carts", name, b.rep, b.lost, b.torn)
		}
	}
}
