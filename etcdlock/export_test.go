package etcdlock

// Waiting returns how many Acquire calls of l stand in the line for the
// semaphore called name.
func Waiting(l *Locker, name string) int { return l.queues.waiting(name) }
