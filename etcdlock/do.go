package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quorumlock/quorumlock/lease"
)

// Do acquires key like Lock, runs fn, then releases the lease. The
// session's keep-alive keeps the lease; fn's context is cancelled, with a
// cause matching lease.ErrLeaseLost, as soon as the lease is lost, and at
// the latest the safety margin before Until when no keep-alive got
// through. Do returns the acquisition error (fn not called), or fn's
// error joined with one matching lease.ErrLeaseLost when the lease was
// lost while fn ran. No goroutine started by Do outlives it.
func (l *Locker) Do(ctx context.Context, key string, fn func(ctx context.Context, le lease.Lease) error) error {
	return l.DoMulti(ctx, []string{key}, fn)
}

// DoMulti is Do on a multi-key lease (see LockMulti).
func (l *Locker) DoMulti(ctx context.Context, keys []string, fn func(ctx context.Context, le lease.Lease) error) error {
	return l.do(ctx, fn, func() (*Lease, error) { return l.lock(ctx, keys, true) })
}

// do runs fn under the lease that acquire takes, as Do says; the
// primitives' Do methods run on it too.
func (l *Locker) do(ctx context.Context, fn func(ctx context.Context, le lease.Lease) error, acquire func() (*Lease, error)) (err error) {
	if fn == nil {
		return errors.New("etcdlock: Do: fn is nil")
	}
	le, err := acquire()
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(ctx)
	stop := make(chan struct{})
	watched := make(chan error, 1)
	go func() { watched <- l.watch(le, stop, cancel) }()
	defer func() {
		close(stop)
		lost := <-watched
		uerr := le.Unlock(context.WithoutCancel(ctx))
		cancel(context.Canceled)
		if lost == nil && errors.Is(uerr, lease.ErrLeaseLost) {
			lost = uerr
		}
		if lost != nil && !errors.Is(err, lease.ErrLeaseLost) {
			err = errors.Join(err, fmt.Errorf("etcdlock: do %q: %w", le.name, lost))
		}
	}()
	return fn(fctx, le)
}

// watch cancels fn's context when the lease is lost or comes within the
// safety margin of Until, until stop; it returns the loss, if any.
func (l *Locker) watch(le *Lease, stop <-chan struct{}, cancel context.CancelCauseFunc) error {
	t := time.NewTimer(time.Until(le.Until()) - l.cfg.margin)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return nil
		case <-le.Lost():
			err := le.Err()
			cancel(err)
			return err
		case <-t.C:
			if d := time.Until(le.Until()) - l.cfg.margin; d > 0 {
				t.Reset(d) // a keep-alive moved Until
				continue
			}
			err := fmt.Errorf("etcdlock: %w: no keep-alive got through and less than the safety margin %v of validity is left", lease.ErrLeaseLost, l.cfg.margin)
			cancel(err)
			return err
		}
	}
}
