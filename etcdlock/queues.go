package etcdlock

import (
	"slices"
	"sync"
)

// queues lines up a Locker's Acquire calls per semaphore, oldest first:
// only the oldest calls, as many as the semaphore has permits, try for a
// permit at once, so a younger caller of this Locker cannot take a freed
// permit while older ones beyond that window wait, and up to Permits
// claims are in flight together.
type queues struct {
	mu sync.Mutex
	m  map[string]*line
}

// line is one semaphore's callers, oldest first; the turns of the first
// window of them are closed.
type line struct {
	window int
	turns  []chan struct{}
}

func newQueues() *queues { return &queues{m: map[string]*line{}} }

// join puts a caller at the back of name's line, whose window is window
// callers wide (at least 1); the channel it returns is closed when the
// caller is within the window.
func (q *queues) join(name string, window int) chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.m[name]
	if l == nil {
		l = &line{window: max(window, 1)}
		q.m[name] = l
	}
	turn := make(chan struct{})
	if len(l.turns) < l.window {
		close(turn)
	}
	l.turns = append(l.turns, turn)
	return turn
}

// leave takes a caller out of name's line, wherever it stands; when it was
// within the window, the oldest caller beyond it comes in.
func (q *queues) leave(name string, turn chan struct{}) {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.m[name]
	i := slices.Index(l.turns, turn)
	l.turns = slices.Delete(l.turns, i, i+1)
	if i < l.window && len(l.turns) >= l.window {
		close(l.turns[l.window-1])
	}
	if len(l.turns) == 0 {
		delete(q.m, name)
	}
}

// full reports whether name's window is full: a caller that did not join
// would pass older ones.
func (q *queues) full(name string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.m[name]
	return l != nil && len(l.turns) >= l.window
}

// waiting returns how many callers are in name's line.
func (q *queues) waiting(name string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if l := q.m[name]; l != nil {
		return len(l.turns)
	}
	return 0
}
