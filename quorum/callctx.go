package quorum

import (
	"context"
	"sync"
	"time"
)

// callCtx is the context of one call's node requests (see send): the
// values of the caller's context, the call's deadline (or the caller's,
// when earlier and the call is not detached), and a Done channel closed at
// the deadline, when the call ends, or (not detached) when the caller's
// context ends. It lives inside the call: context.WithDeadline costs three
// more allocations per call (its context and two closures).
type callCtx struct {
	parent   context.Context
	deadline time.Time
	done     chan struct{}

	mu         sync.Mutex
	err        error
	timer      *time.Timer // fires at the deadline
	stopParent func() bool // unregisters from the caller's context
}

// start sets the context up; it may end at once.
func (x *callCtx) start(parent context.Context, deadline time.Time, detached bool) {
	x.parent, x.deadline, x.done = parent, deadline, make(chan struct{})
	if !detached {
		if pd, ok := parent.Deadline(); ok && pd.Before(deadline) {
			x.deadline = pd
		}
		if err := parent.Err(); err != nil {
			x.end(err)
			return
		}
	}
	d := time.Until(x.deadline)
	if d <= 0 {
		x.end(context.DeadlineExceeded)
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	// Each runs its function in a goroutine of its own, which waits for x.mu.
	x.timer = time.AfterFunc(d, x.expire)
	if !detached && parent.Done() != nil {
		x.stopParent = context.AfterFunc(parent, x.parentDone)
	}
}

func (x *callCtx) expire()     { x.end(context.DeadlineExceeded) }
func (x *callCtx) parentDone() { x.end(x.parent.Err()) }

// end ends the context with err, once.
func (x *callCtx) end(err error) {
	x.mu.Lock()
	if x.err != nil {
		x.mu.Unlock()
		return
	}
	x.err = err
	close(x.done)
	timer, stopParent := x.timer, x.stopParent
	x.mu.Unlock()
	if timer != nil {
		timer.Stop()
	}
	if stopParent != nil {
		stopParent()
	}
}

// Deadline returns the requests' deadline.
func (x *callCtx) Deadline() (time.Time, bool) { return x.deadline, true }

// Done is closed when the context ends.
func (x *callCtx) Done() <-chan struct{} { return x.done }

// Err returns nil until the context ends, then why.
func (x *callCtx) Err() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.err
}

// Value returns the caller's context's value for key.
func (x *callCtx) Value(key any) any { return x.parent.Value(key) }
