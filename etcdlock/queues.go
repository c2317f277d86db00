package etcdlock

import (
	"slices"
	"sync"
)

// queues lines up a Locker's Acquire calls per semaphore, oldest first:
// only the call at the head of a line tries for a permit, so a younger
// caller of this Locker cannot take a freed permit while an older one
// waits.
type queues struct {
	mu sync.Mutex
	m  map[string][]chan struct{} // per semaphore; [0] is the head's, closed
}

func newQueues() *queues { return &queues{m: map[string][]chan struct{}{}} }

// join puts a caller at the back of name's line; the channel it returns
// is closed when the caller reaches the head.
func (q *queues) join(name string) chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	turn := make(chan struct{})
	if len(q.m[name]) == 0 {
		close(turn)
	}
	q.m[name] = append(q.m[name], turn)
	return turn
}

// leave takes a caller out of name's line, wherever it stands; when it was
// the head, the next caller becomes the head.
func (q *queues) leave(name string, turn chan struct{}) {
	q.mu.Lock()
	defer q.mu.Unlock()
	line := q.m[name]
	i := slices.Index(line, turn)
	line = slices.Delete(line, i, i+1)
	if i == 0 && len(line) > 0 {
		close(line[0])
	}
	if len(line) == 0 {
		delete(q.m, name)
		return
	}
	q.m[name] = line
}

// waiting returns how many callers are in name's line.
func (q *queues) waiting(name string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.m[name])
}
