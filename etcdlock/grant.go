package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/quorumlock/quorumlock/lease"
)

// claimed is one etcd key a lease holds, and how the lease gives it back.
type claimed struct {
	key      string        // the lease's key, as Keys returns it
	owner    string        // the etcd key the lease holds (its Token)
	gate     string        // the turn it holds in the Locker's gates; "" for none
	cmp      *clientv3.Cmp // true while owner is still the lease's; nil when the gate makes it so
	rev      int64         // the revision fence
	fenceKey string        // the Fencer's key for it; "" for a key with no fence
}

// claim takes one key of a lease on session s, within ctx.
type claim func(ctx context.Context, s *session) (claimed, error)

// grant is one acquisition that take runs: the claims of its keys in
// order, then, once fenced, publish.
type grant struct {
	op      string // what the caller asked, in errors: "lock", "acquire", ...
	name    string // the lease's name in errors and events
	claims  []claim
	maxWait time.Duration                              // bounds the claims; 0 for ctx alone
	publish func(ctx context.Context, le *Lease) error // nil for none
}

// granted runs take on g and reports the acquisition to the Observer.
func (l *Locker) granted(ctx context.Context, g *grant) (*Lease, error) {
	start := time.Now()
	le, err := l.take(ctx, g, false)
	l.cfg.observer.ObserveAcquire(lease.AcquireEvent{Key: g.name, Attempts: 1, Duration: time.Since(start), Result: resultOf(err), Err: err})
	return le, err
}

// take runs g's claims on the session and hands out the lease. A session
// that etcd no longer knows (it expired before the Locker saw it) is ended
// and the acquisition tried once more on a new one. Close ends the claims.
func (l *Locker) take(ctx context.Context, g *grant, retried bool) (*Lease, error) {
	wctx, cancel := context.WithCancel(ctx)
	if g.maxWait > 0 {
		wctx, cancel = context.WithTimeout(ctx, g.maxWait)
	}
	defer cancel()
	defer context.AfterFunc(l.ctx, cancel)()
	s, err := l.session(wctx)
	if err != nil {
		return nil, l.grantError(ctx, wctx, g, err)
	}
	le := &Lease{l: l, s: s, name: g.name, start: time.Now(), lost: make(chan struct{})}
	for _, c := range g.claims {
		h, err := c(wctx, s)
		if err != nil && sessionGone(err) && !retried {
			l.abandon(le)
			s.end(fmt.Errorf("etcdlock: %w: etcd no longer knows the session's lease: %w", lease.ErrLeaseLost, err), lease.LostExtendFailed)
			cancel()
			return l.take(ctx, g, true)
		}
		if err != nil {
			l.abandon(le)
			return nil, l.grantError(ctx, wctx, g, err)
		}
		le.keys = append(le.keys, h.key)
		le.owned = append(le.owned, h)
		le.fences = append(le.fences, h.rev)
	}
	return l.seal(wctx, ctx, g, le)
}

// seal fences the claimed lease, publishes it, and registers it with its
// session, unless the session is about to end; wctx bounds the calls, ctx
// is the caller's.
func (l *Locker) seal(wctx, ctx context.Context, g *grant, le *Lease) (*Lease, error) {
	if err := l.fence(wctx, le); err != nil {
		l.abandon(le)
		return nil, fmt.Errorf("etcdlock: %s %q: fence: %w", g.op, g.name, err)
	}
	if g.publish != nil {
		if err := g.publish(wctx, le); err != nil {
			l.abandon(le)
			return nil, l.grantError(ctx, wctx, g, err)
		}
	}
	if err := le.s.hold(le); err != nil {
		l.abandon(le)
		return nil, l.grantError(ctx, wctx, g, err)
	}
	if left := time.Until(le.Until()); left < l.cfg.margin {
		// The session's keep-alive is stalled: a lease this close to its
		// end would be lost before its holder could use it.
		le.s.drop(le)
		le.end(fmt.Errorf("etcdlock: %q: %w", g.name, lease.ErrReleased))
		l.abandon(le)
		return nil, fmt.Errorf("etcdlock: %s %q: %w: the session has %v of validity left, under the safety margin %v", g.op, g.name, lease.ErrQuorumUnavailable, left.Round(time.Millisecond), l.cfg.margin)
	}
	return le, nil
}

// fence replaces the revision fences with the Fencer's tokens, if any; a
// key with no fence keeps 0.
func (l *Locker) fence(ctx context.Context, le *Lease) error {
	if l.cfg.fencer == nil {
		return nil
	}
	for i, h := range le.owned {
		if h.fenceKey == "" {
			continue
		}
		f, err := l.cfg.fencer.Next(ctx, h.fenceKey)
		if err != nil {
			return err
		}
		le.fences[i] = f
	}
	return nil
}

// abandon releases the keys a failed acquisition took.
func (l *Locker) abandon(le *Lease) {
	for i := len(le.owned) - 1; i >= 0; i-- {
		if err := l.release(context.Background(), le.owned[i]); err != nil {
			_ = err // retried in the background until the session ends
		}
	}
}

// sessionGone reports whether err says that etcd no longer knows the
// session's lease, or that a key put under it is gone.
func sessionGone(err error) bool {
	return isLeaseGone(err) || errors.Is(err, concurrency.ErrSessionExpired)
}

// grantError maps a failed acquisition to package lease's sentinels. ctx is
// the caller's, wctx the claims' (see take): only its end is the end of the
// wait, while a request's own timeout says etcd did not answer in time.
func (l *Locker) grantError(ctx, wctx context.Context, g *grant, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("etcdlock: %s %q: %w", g.op, g.name, ctx.Err())
	case l.ctx.Err() != nil && !errors.Is(err, lease.ErrClosed):
		return fmt.Errorf("etcdlock: %s %q: %w", g.op, g.name, lease.ErrClosed)
	case errors.Is(err, lease.ErrClosed), errors.Is(err, lease.ErrQuorumUnavailable), errors.Is(err, lease.ErrPermitsMismatch):
		return fmt.Errorf("etcdlock: %s %q: %w", g.op, g.name, err)
	case errors.Is(err, concurrency.ErrLocked):
		return fmt.Errorf("etcdlock: %s %q: %w", g.op, g.name, lease.ErrNotAcquired)
	case waitEnded(wctx, err) && l.reachable(ctx, g.name):
		return fmt.Errorf("etcdlock: %s %q: %w: still held after %v", g.op, g.name, lease.ErrNotAcquired, g.maxWait)
	}
	return fmt.Errorf("etcdlock: %s %q: %w: %w", g.op, g.name, lease.ErrQuorumUnavailable, err)
}

// waitEnded reports whether err ended the claims because their wait, wctx
// (WithMaxWait), ran out, and not because one request to etcd timed out.
func waitEnded(wctx context.Context, err error) bool {
	return errors.Is(err, context.DeadlineExceeded) && errors.Is(wctx.Err(), context.DeadlineExceeded)
}
