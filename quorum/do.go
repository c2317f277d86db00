package quorum

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/lease"
)

// Do acquires key like Lock, runs fn while a watchdog keeps the lease
// extended, then releases it, even when fn panics.
//
// The watchdog extends the lease to the TTL every watchdog interval, and
// retries an unclear extension after half a node timeout. fn's context is
// cancelled, with a cause matching lease.ErrLeaseLost (context.Cause), as soon as
// the lease is lost, and at the latest the safety margin before Until when
// no extension got through: fn should then stop touching the resource.
//
// Do returns the acquisition error when the lock was not acquired (fn is
// not called). Otherwise it returns fn's error, joined with an error
// matching lease.ErrLeaseLost when the lease was lost while fn ran (the watchdog
// lost it, the margin was reached, or the final Unlock found the token gone
// from a majority); an unconfirmed release goes to the Observer only. No
// goroutine started by Do outlives it.
func (l *Locker) Do(ctx context.Context, key string, fn func(ctx context.Context, le lease.Lease) error) error {
	return l.DoMulti(ctx, []string{key}, fn)
}

// DoMulti is Do on a multi-key lease (see LockMulti): the watchdog extends
// every key at once; a key gone from a majority of nodes loses the lease.
func (l *Locker) DoMulti(ctx context.Context, keys []string, fn func(ctx context.Context, le lease.Lease) error) error {
	if fn == nil {
		return errors.New("quorum: Do: fn is nil")
	}
	le, err := l.lock(ctx, keys, l.cfg.retry.Attempts, l.cfg.maxWait)
	if err != nil {
		return err
	}
	return l.run(ctx, le, fn)
}

// run runs fn while a keepalive holds le, then releases le (see Do).
func (l *Locker) run(ctx context.Context, le *Lease, fn func(ctx context.Context, le lease.Lease) error) (err error) {
	fctx, cancel := context.WithCancelCause(ctx)
	ka := l.keepAlive(ctx, le, cancel)
	defer func() {
		lost := ka.close()
		uerr := le.Unlock(context.WithoutCancel(ctx))
		cancel(context.Canceled)
		if lost == nil && errors.Is(uerr, lease.ErrLeaseLost) {
			lost = uerr
		}
		if lost != nil && !errors.Is(err, lease.ErrLeaseLost) {
			err = errors.Join(err, fmt.Errorf("quorum: do %q: %w", le.name, lost))
		}
	}()
	return fn(fctx, le)
}

// keepalive keeps a lease alive for Do, as etcd's Session does a Mutex: a
// watchdog goroutine extends it, and a timer of its own cancels fn's context
// at the safety margin, even while the watchdog waits on an extension.
type keepalive struct {
	l      *Locker
	lease  *Lease
	cancel context.CancelCauseFunc
	stop   chan struct{}
	done   chan struct{}

	mu     sync.Mutex
	margin *time.Timer
	lost   error // the loss, once the lease was lost or the margin reached
}

// keepAlive keeps lease alive until close; cancel ends fn's context.
func (l *Locker) keepAlive(ctx context.Context, le *Lease, cancel context.CancelCauseFunc) *keepalive {
	k := &keepalive{l: l, lease: le, cancel: cancel, stop: make(chan struct{}), done: make(chan struct{})}
	k.mu.Lock()
	k.margin = time.AfterFunc(k.untilMargin(), k.marginReached)
	k.mu.Unlock()
	go k.watch(context.WithoutCancel(ctx))
	return k
}

func (k *keepalive) untilMargin() time.Duration {
	return time.Until(k.lease.Until()) - k.l.cfg.margin
}

// marginReached runs when the margin timer fires, or the validity moved:
// it re-arms the timer while the margin is ahead, else it ends fn's context.
func (k *keepalive) marginReached() {
	k.mu.Lock()
	defer k.mu.Unlock()
	select {
	case <-k.lease.Lost():
		return // released or lost: the watchdog reports a loss
	default:
	}
	if k.lost != nil {
		return
	}
	if d := k.untilMargin(); d > 0 {
		k.margin.Reset(d)
		return
	}
	k.lost = fmt.Errorf("quorum: do %q: %w: no extension got through and less than the safety margin %v of validity is left",
		k.lease.name, lease.ErrLeaseLost, k.l.cfg.margin)
	k.cancel(k.lost)
}

// watch extends the lease until close, and ends fn's context if it is lost.
func (k *keepalive) watch(ctx context.Context) {
	defer close(k.done)
	next := time.NewTimer(k.l.cfg.watchdog)
	defer next.Stop()
	for {
		select {
		case <-k.stop:
			return
		case <-k.lease.moved:
			k.marginReached()
		case <-k.lease.Lost():
			if err := k.lease.Err(); errors.Is(err, lease.ErrLeaseLost) {
				k.mu.Lock()
				if k.lost == nil {
					k.lost = err
				}
				k.mu.Unlock()
				k.cancel(err)
			}
			return
		case <-next.C:
			delay := k.l.cfg.watchdog
			// A loss or a moved validity is handled by its case next round.
			if err := k.lease.Extend(ctx, k.l.cfg.ttl); errors.Is(err, lease.ErrExtendUnconfirmed) {
				delay = max(k.l.cfg.nodeTimeout/2, time.Millisecond) // still held: soon
			}
			next.Reset(delay)
		}
	}
}

// close stops the watchdog and the timer, and returns the loss if any.
func (k *keepalive) close() error {
	close(k.stop)
	<-k.done
	k.mu.Lock()
	defer k.mu.Unlock()
	k.margin.Stop()
	return k.lost
}
