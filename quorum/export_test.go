package quorum

// The Lua sources, for the tests that run each script on its own.
var (
	AcquireSource = acquireSrc
	ReleaseSource = releaseSrc
	ExtendSource  = extendSrc
)

// SubscribedBy returns how many nodes confirmed that they announce key's
// releases to l.
func (l *Locker) SubscribedBy(key string) int { return l.wk.confirmedBy(key) }

// Waiting returns how many Lock calls of l wait for key.
func (l *Locker) Waiting(key string) int {
	l.wk.mu.Lock()
	defer l.wk.mu.Unlock()
	if q := l.wk.keys[key]; q != nil {
		return len(q.waiters)
	}
	return 0
}

// Queued returns how many requests wait for node's worker (not counting a
// batch that is out).
func (l *Locker) Queued(node int) int {
	w := l.workers[node]
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue)
}
