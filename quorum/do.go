package quorum

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Do acquires key like Lock, runs fn while a watchdog keeps the lease
// extended, then releases it.
//
// The watchdog extends the lease to the Locker's TTL every watchdog interval
// (WithWatchdogInterval, default TTL/3). The moment the lease is lost — its
// validity ran out or an extension failed — fn's context is cancelled with
// a cause matching ErrLeaseLost (see context.Cause), and fn should stop
// touching the protected resource at once.
//
// Do returns the acquisition error when the lock was not acquired (fn is
// not called); otherwise fn's error, joined with an error matching
// ErrLeaseLost when the lease was lost while fn ran. The release after fn
// runs even when fn panics, and a release that some nodes did not confirm
// is reported to the Observer, not returned (the key expires by its TTL).
// No goroutine started by Do outlives it.
func (l *Locker) Do(ctx context.Context, key string, fn func(ctx context.Context, lease *Lease) error) (err error) {
	if fn == nil {
		return errors.New("quorum: Do: fn is nil")
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	lease, err := l.lock(ctx, key, l.cfg.retry.Attempts, l.cfg.maxWait, &wg)
	if err != nil {
		return err
	}

	fctx, cancel := context.WithCancelCause(ctx)
	ectx, stopExtend := context.WithCancel(context.WithoutCancel(ctx))
	stop := make(chan struct{})
	watchdogDone := make(chan struct{})
	go l.watchdog(ectx, lease, stop, cancel, watchdogDone)

	defer func() {
		close(stop)
		stopExtend()
		<-watchdogDone
		lost, lostErr := lease.errLost()
		_ = lease.Unlock(context.WithoutCancel(ctx)) // outcome goes to the Observer
		cancel(context.Canceled)
		if lost && !errors.Is(err, ErrLeaseLost) {
			err = errors.Join(err, fmt.Errorf("quorum: do %q: %w", key, lostErr))
		}
	}()
	return fn(fctx, lease)
}

// watchdog extends the lease every interval until stop is closed, and
// cancels fn's context with the loss as cause when the lease is lost.
func (l *Locker) watchdog(ctx context.Context, lease *Lease, stop <-chan struct{}, cancel context.CancelCauseFunc, done chan<- struct{}) {
	defer close(done)
	t := time.NewTimer(l.cfg.watchdog)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-lease.Lost():
			if lost, err := lease.errLost(); lost {
				cancel(err)
			}
			return
		case <-t.C:
			// An error either means the lease is lost (handled by the
			// Lost case next round) or ctx was cancelled by stop.
			_ = lease.Extend(ctx, l.cfg.ttl)
			t.Reset(l.cfg.watchdog)
		}
	}
}
