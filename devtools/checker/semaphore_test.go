package checker_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/quorumlock/quorumlock/devtools/checker"
)

func enter(holder, slot string, fence int64) checker.SemOp {
	return checker.SemOp{Kind: checker.SemEnter, Holder: holder, Slot: slot, Fence: fence}
}

func exit(holder, slot string) checker.SemOp {
	return checker.SemOp{Kind: checker.SemExit, Holder: holder, Slot: slot}
}

func TestSemaphoreAcceptsHoldersWithinThePermits(t *testing.T) {
	ops := []checker.SemOp{
		enter("a", "p1", 1), enter("b", "p2", 1), enter("a", "p1", 1), // a writes twice
		exit("a", "p1"), enter("c", "p1", 2), exit("b", "p2"), enter("d", "p2", 2), exit("c", "p1"), exit("d", "p2"),
	}
	for _, mode := range []checker.Mode{checker.Fenced, checker.Unfenced} {
		v := checker.CheckSemaphore(2, mode, ops)
		if !v.OK() || v.MaxHolders != 2 || v.Accepted != 5 || v.Rejected != 0 || v.Checked != len(ops) {
			t.Errorf("%v: clean history judged %v, max %d, accepted %d, rejected %d", mode, v.Report, v.MaxHolders, v.Accepted, v.Rejected)
		}
	}
}

// pausedHolder is the Kleppmann case on a semaphore of 2 permits: a
// pauses inside while its lease on p1 ends, c takes p1 with a newer
// fence, and a, resumed, writes again.
var pausedHolder = []checker.SemOp{
	enter("a", "p1", 1), enter("b", "p2", 1),
	enter("c", "p1", 2), // a's permit passed on while a was paused
	enter("a", "p1", 1), // a resumes and writes with its old fence
	exit("a", "p1"), exit("b", "p2"), exit("c", "p1"),
}

func TestSemaphoreFenceShutsOutAPausedHolder(t *testing.T) {
	v := checker.CheckSemaphore(2, checker.Fenced, pausedHolder)
	if !v.OK() || v.MaxHolders != 2 || v.Rejected != 1 {
		t.Fatalf("fenced: %v, max %d, rejected %d; want no violation, 2 holders, a's late write rejected", v.Report, v.MaxHolders, v.Rejected)
	}
	// a's time inside ended when c's fence arrived.
	if s := v.Spans[0]; s.Holder != "a" || s.From != 1 || s.To != 3 {
		t.Fatalf("a's span %v, want [1, 3)", s)
	}
}

// Negative control: without fences the paused holder is a third holder.
func TestSemaphoreUnfencedPausedHolderIsCaught(t *testing.T) {
	v := checker.CheckSemaphore(2, checker.Unfenced, pausedHolder)
	if v.OK() || v.MaxHolders != 3 || v.Rejected != 0 {
		t.Fatalf("unfenced: %v, max %d; want 3 holders and violations", v.Report, v.MaxHolders)
	}
	joined := strings.Join(v.Violations, "\n")
	for _, want := range []string{"3 holders inside with 2 permits", "permit p1 held inside by a (fence 1) and c (fence 2)"} {
		if !strings.Contains(joined, want) {
			t.Errorf("violations lack %q:\n%s", want, joined)
		}
	}
}

// Negative controls of a semaphore that hands out too many permits, or a
// permit's fence twice, or none.
func TestSemaphoreCatchesBrokenPermits(t *testing.T) {
	cases := map[string]struct {
		ops     []checker.SemOp
		want    string
		holders int
	}{
		"a third permit": {[]checker.SemOp{enter("a", "p1", 1), enter("b", "p2", 1), enter("c", "p3", 1)},
			"3 holders inside with 2 permits", 3},
		"a fence given twice": {[]checker.SemOp{enter("a", "p1", 4), enter("b", "p1", 4)},
			"permit p1 held inside by a (fence 4) and b (fence 4)", 2},
		"no fence": {[]checker.SemOp{enter("a", "p1", 0)}, "with no fence", 0},
	}
	for name, c := range cases {
		v := checker.CheckSemaphore(2, checker.Fenced, c.ops)
		if v.OK() || v.MaxHolders != c.holders || !strings.Contains(strings.Join(v.Violations, "\n"), c.want) {
			t.Errorf("%s: %v, max %d; want %q and %d holders", name, v.Report, v.MaxHolders, c.want, c.holders)
		}
	}
}

// Each excursion above the permits is one violation, reported at its peak.
func TestSemaphoreReportsEachExcursionAtItsPeak(t *testing.T) {
	ops := []checker.SemOp{
		enter("a", "a", 1), enter("b", "b", 1), enter("c", "c", 1), enter("d", "d", 1), // 4 > 1
		exit("a", "a"), exit("b", "b"), exit("c", "c"), // back to 1
		enter("e", "e", 1), exit("e", "e"), exit("d", "d"), // 2 > 1 again
		checker.SemOp{Holder: "x"},
	}
	v := checker.CheckSemaphore(1, checker.Unfenced, ops)
	if len(v.Violations) != 3 || v.MaxHolders != 4 {
		t.Fatalf("%v, max %d; want 2 excursions (peaks 4 and 2) and the op without a kind", v.Report, v.MaxHolders)
	}
	if !strings.Contains(v.Violations[0], "no kind") || !strings.HasPrefix(v.Violations[1], "4 holders") || !strings.HasPrefix(v.Violations[2], "2 holders") {
		t.Fatalf("violations %q", v.Violations)
	}
}

// The resource is fed by concurrent holders, one permit each: the race
// detector watches it, and the verdict counts every write.
func TestSemaphoreResourceIsSafeForConcurrentUse(t *testing.T) {
	const permits, rounds = 4, 50
	r := checker.NewSemaphoreResource(permits, checker.Fenced)
	var wg sync.WaitGroup
	for p := range permits {
		wg.Go(func() {
			slot := fmt.Sprintf("p%d", p)
			for i := range rounds {
				holder := fmt.Sprintf("%s-%d", slot, i)
				if !r.Enter(slot, int64(i+1), holder) {
					t.Errorf("%s refused", holder)
				}
				r.Exit(slot, holder)
			}
		})
	}
	wg.Wait()
	v := r.Verdict()
	if !v.OK() || v.Accepted != permits*rounds || v.MaxHolders > permits || v.MaxHolders < 1 {
		t.Fatalf("%v, accepted %d, max %d", v.Report, v.Accepted, v.MaxHolders)
	}
}
