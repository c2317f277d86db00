package checker_test

import (
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/devtools/checker"
)

func claim(client int, fence, value int64, out checker.Outcome, call, ret int64) checker.RegisterOp {
	return checker.RegisterOp{Client: client, Kind: checker.OpClaim, Fence: fence, Value: value, Outcome: out, Call: call, Return: ret}
}

func write(client int, fence, value int64, out checker.Outcome, call, ret int64) checker.RegisterOp {
	return checker.RegisterOp{Client: client, Kind: checker.OpWrite, Fence: fence, Value: value, Outcome: out, Call: call, Return: ret}
}

func TestLinearizable(t *testing.T) {
	const acc, rej, unk = checker.Accepted, checker.Rejected, checker.Unknown
	cases := []struct {
		name string
		ops  []checker.RegisterOp
		ok   bool
	}{
		{"sequential holders", []checker.RegisterOp{
			claim(0, 1, 10, acc, 1, 2), write(0, 1, 9, acc, 3, 4),
			claim(1, 2, 9, acc, 5, 6), write(1, 2, 8, acc, 7, 8),
		}, true},
		// The Kleppmann interleaving: the older holder is paused between
		// its claim and its write; the newer one claims and writes; the
		// older write is rejected.
		{"late holder rejected", []checker.RegisterOp{
			claim(0, 1, 10, acc, 1, 2), claim(1, 2, 10, acc, 3, 4), write(1, 2, 9, acc, 5, 6),
			write(0, 1, 9, rej, 7, 8),
		}, true},
		{"stale claim rejected", []checker.RegisterOp{
			claim(1, 2, 10, acc, 1, 2), claim(0, 1, 0, rej, 3, 4),
		}, true},
		// Overlapping calls may be ordered either way.
		{"concurrent claims", []checker.RegisterOp{
			claim(0, 2, 10, acc, 1, 10), claim(1, 1, 10, rej, 2, 9),
		}, true},
		// A write that never answered may have taken effect...
		{"unknown write took effect", []checker.RegisterOp{
			claim(0, 1, 10, acc, 1, 2), write(0, 1, 9, unk, 3, 0), claim(1, 2, 9, acc, 5, 6),
		}, true},
		// ...or not.
		{"unknown write did not", []checker.RegisterOp{
			claim(0, 1, 10, acc, 1, 2), write(0, 1, 9, unk, 3, 0), claim(1, 2, 10, acc, 5, 6),
		}, true},
		// Negative controls: each is a real violation.
		{"stale write accepted", []checker.RegisterOp{
			claim(0, 1, 10, acc, 1, 2), claim(1, 2, 10, acc, 3, 4), write(1, 2, 9, acc, 5, 6),
			write(0, 1, 9, acc, 7, 8),
		}, false},
		{"claim reads a value never written", []checker.RegisterOp{
			claim(0, 1, 10, acc, 1, 2), write(0, 1, 9, acc, 3, 4), claim(1, 2, 10, acc, 5, 6),
		}, false},
		{"current write rejected", []checker.RegisterOp{
			claim(0, 1, 10, acc, 1, 2), write(0, 1, 9, rej, 3, 4),
		}, false},
		{"lower fence claim accepted", []checker.RegisterOp{
			claim(0, 5, 10, acc, 1, 2), claim(1, 3, 10, acc, 3, 4),
		}, false},
		{"return before call", []checker.RegisterOp{claim(0, 1, 10, acc, 5, 4)}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := checker.Linearizable(10, c.ops, 10*time.Second)
			if r.OK() != c.ok {
				t.Fatalf("OK() = %v, want %v: %v", r.OK(), c.ok, r)
			}
		})
	}
}

func TestLostUpdates(t *testing.T) {
	if r := checker.LostUpdates(100, 90, 10); !r.OK() {
		t.Fatalf("no loss reported as %v", r)
	}
	// Negative controls: two holders wrote the same value (one lost), and
	// a stale holder wrote back an old, higher value (three lost).
	for _, c := range []struct {
		final    int64
		accepted int
		lost     int64
	}{{91, 10, 1}, {93, 10, 3}} {
		r := checker.LostUpdates(100, c.final, c.accepted)
		if r.OK() || checker.Lost(100, c.final, c.accepted) != c.lost {
			t.Fatalf("final %d after %d accepted: %v, lost %d", c.final, c.accepted, r, checker.Lost(100, c.final, c.accepted))
		}
	}
}
