package checker_test

import (
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/devtools/checker"
)

func tw(leader string, term int64) checker.TermWrite {
	return checker.TermWrite{Leader: leader, Term: term}
}

func TestElectionAcceptsOneLeaderPerIncreasingTerm(t *testing.T) {
	ws := []checker.TermWrite{tw("a", 1), tw("a", 1), tw("b", 2), tw("c", 5), tw("c", 5)}
	for _, mode := range []checker.Mode{checker.Fenced, checker.Unfenced} {
		v := checker.CheckElection(mode, ws)
		if !v.OK() || v.Accepted != 5 || v.Terms != 3 || v.Checked != 5 {
			t.Errorf("%v: clean history judged %v (%+v)", mode, v.Report, v)
		}
	}
}

// A deposed leader (paused past its leadership) writes after its successor.
var deposed = []checker.TermWrite{tw("a", 1), tw("b", 2), tw("a", 1), tw("b", 2)}

func TestElectionFenceRejectsADeposedLeader(t *testing.T) {
	v := checker.CheckElection(checker.Fenced, deposed)
	if !v.OK() || v.Accepted != 3 || v.Rejected != 1 {
		t.Fatalf("fenced: %v (%+v); want the deposed leader's write rejected", v.Report, v)
	}
}

// Negative controls: histories the checker must catch.
func TestElectionCatchesViolations(t *testing.T) {
	cases := []struct {
		name string
		mode checker.Mode
		ws   []checker.TermWrite
		want string
		n    int
	}{
		{"unfenced deposed leader", checker.Unfenced, deposed, "write 3 by a in term 1 accepted after term 2 (by b): the term went back", 1},
		// b's second write in term 3 is not reported again.
		{"two leaders in a term", checker.Fenced, []checker.TermWrite{tw("a", 3), tw("b", 3), tw("b", 3)}, "write 2: two leaders in term 3, a and b", 1},
		{"no term", checker.Fenced, []checker.TermWrite{tw("a", 0)}, "write 1 by a with no term (0)", 1},
	}
	for _, c := range cases {
		v := checker.CheckElection(c.mode, c.ws)
		if len(v.Violations) != c.n || !strings.Contains(strings.Join(v.Violations, "\n"), c.want) {
			t.Errorf("%s: %v; want %d violation: %q", c.name, v.Report, c.n, c.want)
		}
	}
}
