package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quorumlock/quorumlock/quorum"
)

// Do acquires key like Lock, runs fn, then releases the lease. The
// session's keep-alive keeps the lease; fn's context is cancelled, with a
// cause matching quorum.ErrLeaseLost, as soon as the lease is lost, and at
// the latest the safety margin before Until when no keep-alive got
// through. Do returns the acquisition error (fn not called), or fn's
// error joined with one matching quorum.ErrLeaseLost when the lease was
// lost while fn ran. No goroutine started by Do outlives it.
func (l *Locker) Do(ctx context.Context, key string, fn func(ctx context.Context, lease *Lease) error) error {
	return l.DoMulti(ctx, []string{key}, fn)
}

// DoMulti is Do on a multi-key lease (see LockMulti).
func (l *Locker) DoMulti(ctx context.Context, keys []string, fn func(ctx context.Context, lease *Lease) error) (err error) {
	if fn == nil {
		return errors.New("etcdlock: Do: fn is nil")
	}
	lease, err := l.LockMulti(ctx, keys...)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(ctx)
	stop := make(chan struct{})
	watched := make(chan error, 1)
	go func() { watched <- l.watch(lease, stop, cancel) }()
	defer func() {
		close(stop)
		lost := <-watched
		uerr := lease.Unlock(context.WithoutCancel(ctx))
		cancel(context.Canceled)
		if lost == nil && errors.Is(uerr, quorum.ErrLeaseLost) {
			lost = uerr
		}
		if lost != nil && !errors.Is(err, quorum.ErrLeaseLost) {
			err = errors.Join(err, fmt.Errorf("etcdlock: do %q: %w", lease.name, lost))
		}
	}()
	return fn(fctx, lease)
}

// watch cancels fn's context when the lease is lost or comes within the
// safety margin of Until, until stop; it returns the loss, if any.
func (l *Locker) watch(lease *Lease, stop <-chan struct{}, cancel context.CancelCauseFunc) error {
	t := time.NewTimer(time.Until(lease.Until()) - l.cfg.margin)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return nil
		case <-lease.Lost():
			err := lease.Err()
			cancel(err)
			return err
		case <-t.C:
			if d := time.Until(lease.Until()) - l.cfg.margin; d > 0 {
				t.Reset(d) // a keep-alive moved Until
				continue
			}
			err := fmt.Errorf("etcdlock: %w: no keep-alive got through and less than the safety margin %v of validity is left", quorum.ErrLeaseLost, l.cfg.margin)
			cancel(err)
			return err
		}
	}
}
