package checker_test

import (
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/devtools/checker"
)

func rb(h string) checker.RWOp { return checker.RWOp{Kind: checker.ReadBegin, Holder: h} }
func re(h string) checker.RWOp { return checker.RWOp{Kind: checker.ReadEnd, Holder: h} }
func wb(h string, f int64) checker.RWOp {
	return checker.RWOp{Kind: checker.WriteBegin, Holder: h, Fence: f}
}
func we(h string) checker.RWOp { return checker.RWOp{Kind: checker.WriteEnd, Holder: h} }

func TestRWAcceptsReadersTogetherAndWritersAlone(t *testing.T) {
	ops := []checker.RWOp{
		rb("r1"), rb("r2"), rb("r3"), re("r2"), re("r1"), re("r3"),
		wb("w1", 1), wb("w1", 1), we("w1"), rb("r1"), re("r1"), wb("w2", 2), we("w2"),
	}
	for _, mode := range []checker.Mode{checker.Fenced, checker.Unfenced} {
		v := checker.CheckRW(mode, ops)
		if !v.OK() || v.MaxReaders != 3 || v.Reads != 4 || v.Writes != 3 || v.Checked != len(ops) {
			t.Errorf("%v: clean history judged %v (%+v)", mode, v.Report, v)
		}
	}
}

// A writer paused past its lease: the next writer's fence shuts it out,
// and its late write is rejected.
var pausedWriter = []checker.RWOp{wb("w1", 1), wb("w2", 2), wb("w1", 1), we("w2"), we("w1")}

func TestRWFenceShutsOutAPausedWriter(t *testing.T) {
	v := checker.CheckRW(checker.Fenced, pausedWriter)
	if !v.OK() || v.Writes != 2 || v.Rejected != 1 {
		t.Fatalf("fenced: %v (%+v); want no violation and the late write rejected", v.Report, v)
	}
}

// Negative controls: overlaps the checker must catch.
func TestRWCatchesOverlaps(t *testing.T) {
	cases := []struct {
		name string
		mode checker.Mode
		ops  []checker.RWOp
		want string
	}{
		{"unfenced paused writer", checker.Unfenced, pausedWriter, "write by w2 (fence 2) began at op 2 while w1 (fence 1) was writing"},
		{"read during a write", checker.Fenced, []checker.RWOp{wb("w", 1), rb("r"), re("r"), we("w")}, "read by r began at op 2 while w (fence 1) was writing"},
		// Readers carry no fence: a reader paused past its lease reads on
		// beside the writer, fenced or not.
		{"paused reader", checker.Fenced, []checker.RWOp{rb("r"), wb("w", 1), re("r"), we("w")}, "write by w (fence 1) began at op 2 while r was reading (since op 1)"},
		{"a fence given twice", checker.Fenced, []checker.RWOp{wb("w1", 3), wb("w2", 3)}, "write by w2 (fence 3) began at op 2 while w1 (fence 3) was writing"},
		{"no fence", checker.Fenced, []checker.RWOp{wb("w", 0)}, "write by w with no fence"},
		{"no kind", checker.Unfenced, []checker.RWOp{{Holder: "x"}}, "no kind"},
	}
	for _, c := range cases {
		v := checker.CheckRW(c.mode, c.ops)
		if v.OK() || !strings.Contains(strings.Join(v.Violations, "\n"), c.want) {
			t.Errorf("%s: %v; want %q", c.name, v.Report, c.want)
		}
	}
}
