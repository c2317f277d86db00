package placement

import (
	"context"
	"sync/atomic"
	"time"
)

// admission bounds the placements under way without a locker: one per
// pool connection, at most limit waiting, none longer than wait.
type admission struct {
	slots   chan struct{}
	waiting atomic.Int64
	limit   int64
	wait    time.Duration
}

func newAdmission(slots, limit int, wait time.Duration) *admission {
	return &admission{slots: make(chan struct{}, slots), limit: int64(limit), wait: wait}
}

// enter waits for a free place. It returns the function that frees it; or
// none, and the result and detail of a request that found none within the
// wait, found the limit reached, or whose context ended.
func (a *admission) enter(ctx context.Context) (leave func(), result, detail string) {
	if a.waiting.Add(1) > a.limit {
		a.waiting.Add(-1)
		return nil, "shed", "too many requests wait; retry"
	}
	defer a.waiting.Add(-1)
	t := time.NewTimer(a.wait)
	defer t.Stop()
	select {
	case a.slots <- struct{}{}:
		return func() { <-a.slots }, "", ""
	case <-ctx.Done():
		return nil, "cancelled", "request cancelled or out of time"
	case <-t.C:
		return nil, "shed", "the order service is busy; retry"
	}
}
