package checker_test

import (
	"fmt"
	"testing"

	"github.com/quorumlock/quorumlock/devtools/checker"
)

func TestMaxOverlap(t *testing.T) {
	spans := []checker.Span{
		{Holder: "a", From: 0, To: 10},
		{Holder: "b", From: 10, To: 20}, // touches a: no overlap
		{Holder: "c", From: 5, To: 12},
		{Holder: "d", From: 11, To: 11}, // empty
		{Holder: "e", From: 11, To: 30},
	}
	if n, at := checker.MaxOverlap(spans); n != 3 || at != 11 {
		t.Fatalf("MaxOverlap = %d at %d, want 3 at 11", n, at)
	}
	if n, at := checker.MaxOverlap(nil); n != 0 || at != 0 {
		t.Fatalf("MaxOverlap(nil) = %d at %d", n, at)
	}
	// Above 1 from 5 to 20 (peak 3 at 11), then from 45 to 46.
	spans = append(spans, checker.Span{Holder: "f", From: 40, To: 50}, checker.Span{Holder: "g", From: 45, To: 46})
	_, _, crowds := checker.Crowds(spans, 1)
	if len(crowds) != 2 || len(crowds[0].Spans) != 3 || crowds[0].At != 11 || len(crowds[1].Spans) != 2 || crowds[1].At != 45 {
		t.Fatalf("crowds above 1: %v", crowds)
	}
	if got, want := crowds[0].String(), "3 at once at 11: c on  (fence 0) [5, 12), b on  (fence 0) [10, 20), e on  (fence 0) [11, 30)"; got != want {
		t.Fatalf("crowd %q, want %q", got, want)
	}
}

// spansFrom makes up to 24 spans on [0, 48) out of fuzz bytes.
func spansFrom(data []byte) []checker.Span {
	var spans []checker.Span
	for i := 0; i+1 < len(data) && len(spans) < 24; i += 2 {
		from := int64(data[i] % 32)
		spans = append(spans, checker.Span{Holder: fmt.Sprint(i / 2), From: from, To: from + int64(data[i+1]%17) - 1})
	}
	return spans
}

// bruteCounts counts the open spans at each time of [0, 48).
func bruteCounts(spans []checker.Span) []int {
	counts := make([]int, 48)
	for ts := range counts {
		for _, s := range spans {
			if s.From <= int64(ts) && int64(ts) < s.To {
				counts[ts]++
			}
		}
	}
	return counts
}

// FuzzMaxOverlap checks the sweep against a count at every time: the
// maximum, where it is first reached, and the peak of every excursion
// above a limit.
func FuzzMaxOverlap(f *testing.F) {
	f.Add([]byte{0, 10, 10, 10, 5, 7, 11, 1, 11, 19}, uint8(1))
	f.Add([]byte{3, 3, 3, 3, 3, 3}, uint8(0))
	f.Add([]byte{}, uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, limit uint8) {
		spans := spansFrom(data)
		counts := bruteCounts(spans)
		want, wantAt := 0, int64(0)
		var peaks []int // the peak of each excursion above limit
		for ts, c := range counts {
			if c > want {
				want, wantAt = c, int64(ts)
			}
			if c > int(limit%8) {
				if ts == 0 || counts[ts-1] <= int(limit%8) {
					peaks = append(peaks, 0)
				}
				peaks[len(peaks)-1] = max(peaks[len(peaks)-1], c)
			}
		}
		n, at := checker.MaxOverlap(spans)
		if n != want || at != wantAt {
			t.Fatalf("MaxOverlap = %d at %d, brute force %d at %d; spans %v", n, at, want, wantAt, spans)
		}
		_, _, crowds := checker.Crowds(spans, int(limit%8))
		if len(crowds) != len(peaks) {
			t.Fatalf("%d crowds above %d, brute force %d (%v); spans %v", len(crowds), limit%8, len(peaks), peaks, spans)
		}
		for i, c := range crowds {
			if len(c.Spans) != peaks[i] || counts[c.At] != peaks[i] {
				t.Fatalf("crowd %d: %v, brute force peak %d", i, c, peaks[i])
			}
		}
	})
}

// opsFrom makes a semaphore history out of fuzz bytes: 4 holders, 3
// permits, fences 0 to 7.
func opsFrom(data []byte) []checker.SemOp {
	ops := make([]checker.SemOp, 0, len(data))
	for _, b := range data {
		holder, slot := fmt.Sprintf("h%d", b>>1&3), fmt.Sprintf("p%d", (b>>3&3)%3)
		if b&1 == 0 {
			ops = append(ops, enter(holder, slot, int64(b>>5)))
		} else {
			ops = append(ops, exit(holder, slot))
		}
	}
	return ops
}

// bruteMaxHolders replays ops on the simplest model of the resource and
// counts who is inside after each operation.
func bruteMaxHolders(mode checker.Mode, ops []checker.SemOp) int {
	type hs struct{ holder, slot string }
	inside := map[hs]bool{}
	last := map[string]int64{}
	most := 0
	for _, op := range ops {
		k := hs{op.Holder, op.Slot}
		switch {
		case op.Kind == checker.SemExit:
			delete(inside, k)
		case mode == checker.Unfenced:
			inside[k] = true
		case op.Fence <= 0 || op.Fence < last[op.Slot]:
			// refused
		default:
			if op.Fence > last[op.Slot] {
				for o := range inside {
					if o.slot == op.Slot && o.holder != op.Holder {
						delete(inside, o)
					}
				}
				last[op.Slot] = op.Fence
			}
			inside[k] = true
		}
		most = max(most, len(inside))
	}
	return most
}

// FuzzSemaphoreMaxHolders checks the semaphore checker's count of holders
// inside at once against a replay that counts after every operation.
func FuzzSemaphoreMaxHolders(f *testing.F) {
	f.Add([]byte{0x20, 0x2a, 0x48, 0x22, 0x21, 0x2b, 0x49}, false)
	f.Add([]byte{0x20, 0x2a, 0x48, 0x22, 0x21, 0x2b, 0x49}, true)
	f.Add([]byte{0x00, 0xe2, 0x40}, false)
	f.Fuzz(func(t *testing.T, data []byte, unfenced bool) {
		mode := checker.Fenced
		if unfenced {
			mode = checker.Unfenced
		}
		ops := opsFrom(data)
		v := checker.CheckSemaphore(3, mode, ops)
		if want := bruteMaxHolders(mode, ops); v.MaxHolders != want {
			t.Fatalf("%v: MaxHolders %d, brute force %d; ops %v", mode, v.MaxHolders, want, ops)
		}
		if v.MaxHolders > 3 && v.OK() {
			t.Fatalf("%d holders with 3 permits judged OK", v.MaxHolders)
		}
	})
}
