package checker_test

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/devtools/checker"
)

var t0 = time.Now()

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestExclusionAcceptsSequentialHolds(t *testing.T) {
	var h checker.Holds
	h.Add(checker.Hold{Key: "k", Holder: "a", Fence: 1, From: at(0), To: at(10)})
	h.Add(checker.Hold{Key: "k", Holder: "b", Fence: 2, From: at(10), To: at(20)})
	h.Add(checker.Hold{Key: "other", Holder: "c", Fence: 1, From: at(5), To: at(15)}) // another key may overlap
	if r := checker.Exclusion(h.All()); !r.OK() || r.Checked != 3 {
		t.Fatalf("clean history judged %v", r)
	}
}

// Negative control: two holders at once must be caught.
func TestExclusionCatchesDoubleGrant(t *testing.T) {
	holds := []checker.Hold{
		{Key: "k", Holder: "a", Fence: 1, From: at(0), To: at(100)},
		{Key: "k", Holder: "b", Fence: 2, From: at(120), To: at(130)},
		{Key: "k", Holder: "c", Fence: 3, From: at(50), To: at(60)}, // inside a's hold
	}
	r := checker.Exclusion(holds)
	if r.OK() || len(r.Violations) != 1 || !strings.Contains(r.Violations[0], "held by a") {
		t.Fatalf("double grant not caught exactly once: %v", r)
	}
}

func TestExclusionRejectsBackwardsHold(t *testing.T) {
	r := checker.Exclusion([]checker.Hold{{Key: "k", Holder: "a", From: at(10), To: at(0)}})
	if r.OK() {
		t.Fatal("a hold that ends before it starts was accepted")
	}
}

// Property: random disjoint holds pass; shifting one into its neighbour is caught.
func TestExclusionProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 200; round++ {
		n := 2 + rng.IntN(30)
		holds := make([]checker.Hold, n)
		ms := 0
		for i := range holds {
			ms += rng.IntN(5)
			d := 1 + rng.IntN(20)
			holds[i] = checker.Hold{Key: "k", Holder: string(rune('a' + i%26)), Fence: int64(i + 1), From: at(ms), To: at(ms + d)}
			ms += d
		}
		rng.Shuffle(len(holds), func(i, j int) { holds[i], holds[j] = holds[j], holds[i] })
		if r := checker.Exclusion(holds); !r.OK() {
			t.Fatalf("round %d: disjoint holds judged %v", round, r)
		}
		i := rng.IntN(n)
		holds[i].To = holds[i].To.Add(time.Hour) // now overlaps every later hold
		holds[i].Holder = "intruder"
		later := 0
		for _, h := range holds {
			if h.From.After(holds[i].From) {
				later++
			}
		}
		if r := checker.Exclusion(holds); later > 0 && r.OK() {
			t.Fatalf("round %d: overlap not caught", round)
		}
	}
}

func TestFencing(t *testing.T) {
	ok := []checker.Write{{"r", 1, "a"}, {"r", 2, "b"}, {"s", 1, "c"}, {"r", 7, "d"}}
	if r := checker.Fencing(ok); !r.OK() {
		t.Fatalf("increasing fences judged %v", r)
	}
	// Negative controls: a late holder let through, a repeated fence, no fence.
	for name, ws := range map[string][]checker.Write{
		"regression": {{"r", 5, "a"}, {"r", 3, "late"}},
		"repeat":     {{"r", 5, "a"}, {"r", 5, "b"}},
		"unfenced":   {{"r", 0, "a"}},
	} {
		if r := checker.Fencing(ws); r.OK() {
			t.Errorf("%s: not caught", name)
		}
	}
}
