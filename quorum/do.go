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
// (WithWatchdogInterval, default TTL/3). An extension whose outcome is
// unclear (ErrExtendUnconfirmed) is retried after half a node timeout while
// validity is left. fn's context is cancelled, with a cause matching
// ErrLeaseLost (see context.Cause), as soon as the lease is lost, and at the
// latest the safety margin (WithSafetyMargin, default TTL/10) before Until
// when no extension got through: fn should then stop touching the protected
// resource at once.
//
// Do returns the acquisition error when the lock was not acquired (fn is
// not called). Otherwise it returns fn's error, joined with an error
// matching ErrLeaseLost when the lease was lost while fn ran: because the
// watchdog lost it, because the safety margin was reached, or because the
// final Unlock found the token gone from so many nodes that no majority held
// it (a node restarted, a key was evicted). The release after fn runs
// even when fn panics; a release that some nodes did not confirm is
// reported to the Observer, not returned (the key expires by its TTL). No
// goroutine started by Do outlives it.
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
	// The margin is watched by the lease's own timer, not by the watchdog,
	// which may be waiting on an extension when the margin is reached.
	marginErr := fmt.Errorf("quorum: do %q: %w: no extension got through and less than the safety margin %v of validity is left",
		key, ErrLeaseLost, l.cfg.margin)
	marginHit := make(chan struct{})
	lease.watchMargin(l.cfg.margin, func() {
		cancel(marginErr)
		close(marginHit)
	})
	stop := make(chan struct{})
	watchdogDone := make(chan struct{})
	var lost error // written by the watchdog before watchdogDone closes
	go func() {
		defer close(watchdogDone)
		lost = l.watchdog(ectx, lease, stop, cancel)
	}()

	defer func() {
		close(stop)
		stopExtend()
		<-watchdogDone
		uerr := lease.Unlock(context.WithoutCancel(ctx))
		lease.detach()
		cancel(context.Canceled)
		if lost == nil {
			select {
			case <-marginHit:
				lost = marginErr
			default:
				if errors.Is(uerr, ErrLeaseLost) {
					lost = uerr
				}
			}
		}
		if lost != nil && !errors.Is(err, ErrLeaseLost) {
			err = errors.Join(err, fmt.Errorf("quorum: do %q: %w", key, lost))
		}
	}()
	return fn(fctx, lease)
}

// watchdog extends the lease until stop is closed. When the lease is lost
// it cancels fn's context with the loss as cause and returns the loss.
func (l *Locker) watchdog(ctx context.Context, lease *Lease, stop <-chan struct{}, cancel context.CancelCauseFunc) error {
	next := time.NewTimer(l.cfg.watchdog)
	defer next.Stop()
	for {
		select {
		case <-stop:
			return nil
		case <-lease.Lost():
			if lost, err := lease.errLost(); lost {
				cancel(err)
				return err
			}
			return nil
		case <-next.C:
			delay := l.cfg.watchdog
			if err := lease.Extend(ctx, l.cfg.ttl); errors.Is(err, ErrExtendUnconfirmed) {
				// Still held, outcome unclear: try again soon.
				delay = max(l.cfg.nodeTimeout/2, time.Millisecond)
			}
			// A lost lease is handled by the Lost case next round.
			next.Reset(delay)
		}
	}
}
