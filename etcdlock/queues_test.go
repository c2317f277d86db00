package etcdlock

import "testing"

// TestQueuesWindow: the oldest window callers of a line hold their turn;
// one of them leaving lets in the oldest beyond; one beyond leaving lets in
// nobody; full says whether the window is taken.
func TestQueuesWindow(t *testing.T) {
	q := newQueues()
	var turns []chan struct{}
	for range 4 {
		turns = append(turns, q.join("s", 2))
	}
	check := func(step string, want ...bool) {
		t.Helper()
		for i := range want {
			if isClosed(turns[i]) != want[i] {
				t.Fatalf("%s: turn %d open %v, want %v", step, i, isClosed(turns[i]), want[i])
			}
		}
	}
	check("joined", true, true, false, false)
	if !q.full("s") || q.waiting("s") != 4 {
		t.Fatalf("full %v, waiting %d", q.full("s"), q.waiting("s"))
	}
	q.leave("s", turns[3])
	check("the youngest, beyond the window, left", true, true, false)
	q.leave("s", turns[0])
	check("the oldest left", true, true, true)
	q.leave("s", turns[1])
	if q.full("s") || q.waiting("s") != 1 {
		t.Fatalf("one caller of a window of 2: full %v, waiting %d", q.full("s"), q.waiting("s"))
	}
	q.leave("s", turns[2])
	if len(q.m) != 0 {
		t.Fatalf("an empty line stays: %v", q.m)
	}
	if c := q.join("t", 0); !isClosed(c) {
		t.Fatal("a window of 0 admits nobody")
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
