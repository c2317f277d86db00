// Package wait holds the repository's one context-aware sleep, so that no
// package hand-writes a timer and a select to wait out a delay.
//
// Package quorum keeps its own (it imports go-redis and the standard library
// only); every other package uses this one. Standard library only.
package wait

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx ends, whichever comes first. It returns nil
// once d has passed, and ctx.Err() when ctx ended first. A d of zero or less
// does not wait: it returns ctx.Err() at once (nil while ctx is live).
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
