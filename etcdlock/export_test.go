package etcdlock

import "context"

// Waiting returns how many Acquire calls of l stand in the line for the
// semaphore called name.
func Waiting(l *Locker, name string) int { return l.queues.waiting(name) }

// GrantError is how Lock reports a failed acquisition of key: ctx is the
// caller's context, wctx the claims' (bounded by WithMaxWait).
func GrantError(l *Locker, ctx, wctx context.Context, key string, err error) error {
	return l.grantError(ctx, wctx, &grant{op: "lock", name: key, maxWait: l.cfg.maxWait}, err)
}
