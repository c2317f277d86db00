package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/quorumlock/quorumlock/internal/wait"
	"github.com/quorumlock/quorumlock/lease"
)

// Lock acquires key, waiting for the owners before it in etcd's queue
// until ctx ends or WithMaxWait passes. On failure the error matches
// lease.ErrNotAcquired (still held at the end of the wait),
// lease.ErrQuorumUnavailable (etcd has no leader or cannot be reached),
// ctx.Err(), the Fencer's error, or lease.ErrClosed. The Lease returned
// is a *Lease.
func (l *Locker) Lock(ctx context.Context, key string) (lease.Lease, error) {
	return held(l.lock(ctx, []string{key}, true))
}

// TryLock makes one attempt: it fails with lease.ErrNotAcquired when
// another owner holds key.
func (l *Locker) TryLock(ctx context.Context, key string) (lease.Lease, error) {
	return held(l.lock(ctx, []string{key}, false))
}

// LockMulti acquires every key in one lease, one recipe lock per key in
// sorted order (duplicates once); a call that fails releases what it took.
func (l *Locker) LockMulti(ctx context.Context, keys ...string) (lease.Lease, error) {
	return held(l.lock(ctx, keys, true))
}

// TryLockMulti is LockMulti without waiting.
func (l *Locker) TryLockMulti(ctx context.Context, keys ...string) (lease.Lease, error) {
	return held(l.lock(ctx, keys, false))
}

// held returns le as a lease.Lease: nil, not a nil *Lease, when there is none.
func held(le *Lease, err error) (lease.Lease, error) {
	if le == nil {
		return nil, err
	}
	return le, err
}

// lock takes every key of keys, waiting for each or not.
func (l *Locker) lock(ctx context.Context, keys []string, wait bool) (*Lease, error) {
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	name := strings.Join(keys, ",")
	if len(keys) == 0 || slices.Contains(keys, "") {
		return nil, errors.New("etcdlock: empty key")
	}
	start := time.Now()
	le, err := l.take(ctx, keys, name, wait, false)
	l.cfg.observer.ObserveAcquire(lease.AcquireEvent{Key: name, Attempts: 1, Duration: time.Since(start), Result: resultOf(err), Err: err})
	return le, err
}

// take acquires the keys in order and hands out the lease. A session that
// etcd no longer knows (it expired before the Locker saw it) is ended and
// the acquisition tried once more on a new one.
func (l *Locker) take(ctx context.Context, keys []string, name string, wait, retried bool) (*Lease, error) {
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if wait && l.cfg.maxWait > 0 {
		wctx, cancel = context.WithTimeout(ctx, l.cfg.maxWait)
	}
	defer cancel()
	s, err := l.session(wctx)
	if err != nil {
		return nil, l.lockError(ctx, name, err)
	}
	le := &Lease{l: l, s: s, name: name, keys: keys, start: time.Now(), lost: make(chan struct{})}
	for _, k := range keys {
		m, err := l.acquire(wctx, s, k, wait)
		if err != nil && (isLeaseGone(err) || errors.Is(err, concurrency.ErrSessionExpired)) && !retried {
			l.abandon(le)
			s.end(fmt.Errorf("etcdlock: %w: etcd no longer knows the session's lease: %w", lease.ErrLeaseLost, err), lease.LostExtendFailed)
			cancel()
			return l.take(ctx, keys, name, wait, true)
		}
		if err != nil {
			l.abandon(le)
			return nil, l.lockError(ctx, name, err)
		}
		le.muts = append(le.muts, m)
		le.fences = append(le.fences, m.Header().Revision)
	}
	if err := l.fence(wctx, le); err != nil {
		l.abandon(le)
		return nil, fmt.Errorf("etcdlock: lock %q: fence: %w", name, err)
	}
	if err := s.hold(le); err != nil {
		l.abandon(le)
		return nil, l.lockError(ctx, name, err)
	}
	if left := time.Until(le.Until()); left < l.cfg.margin {
		// The session's keep-alive is stalled: a lease this close to its
		// end would be lost before its holder could use it.
		le.s.drop(le)
		le.end(fmt.Errorf("etcdlock: %q: %w", name, lease.ErrReleased))
		l.abandon(le)
		return nil, fmt.Errorf("etcdlock: lock %q: %w: the session has %v of validity left, under the safety margin %v", name, lease.ErrQuorumUnavailable, left.Round(time.Millisecond), l.cfg.margin)
	}
	return le, nil
}

// acquire takes key's turn in this Locker, then the recipe's lock.
func (l *Locker) acquire(ctx context.Context, s *session, key string, wait bool) (*concurrency.Mutex, error) {
	if !l.gates.enter(ctx, key, wait) {
		if wait {
			return nil, ctx.Err()
		}
		return nil, concurrency.ErrLocked // another call of this Locker has it
	}
	m := concurrency.NewMutex(s.cs, l.cfg.prefix+key)
	if !wait {
		tctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), l.cfg.nodeTimeout)
		defer cancel()
		err := m.TryLock(tctx)
		if err != nil {
			l.gates.leave(key)
		}
		return m, err
	}
	return m, l.wait(ctx, key, m)
}

// wait runs the recipe's Lock, which returns when ctx ends except for the
// deletion of its own key, which it makes with no deadline: that part, and
// a lock won just as ctx ended, finish in the background, holding the
// key's turn in this Locker until then.
func (l *Locker) wait(ctx context.Context, key string, m *concurrency.Mutex) error {
	done := make(chan error, 1)
	l.bg(func() { done <- m.Lock(clientv3.WithRequireLeader(ctx)) })
	select {
	case err := <-done:
		if err != nil {
			l.gates.leave(key)
		}
		return err
	case <-ctx.Done():
	}
	l.bg(func() {
		if err := <-done; err == nil {
			_ = l.release(context.Background(), key, m)
			return
		}
		l.gates.leave(key)
	})
	return ctx.Err()
}

// fence replaces the revision fences with the Fencer's tokens, if any.
func (l *Locker) fence(ctx context.Context, le *Lease) error {
	if l.cfg.fencer == nil {
		return nil
	}
	for i, k := range le.keys {
		f, err := l.cfg.fencer.Next(ctx, k)
		if err != nil {
			return err
		}
		le.fences[i] = f
	}
	return nil
}

// abandon releases the keys a failed Lock took.
func (l *Locker) abandon(le *Lease) {
	for i := len(le.muts) - 1; i >= 0; i-- {
		if err := l.release(context.Background(), le.keys[i], le.muts[i]); err != nil {
			_ = err // retried in the background until the session ends
		}
	}
}

// release deletes key's recipe key within the node timeout and gives the
// key's turn back; when etcd does not confirm, it keeps the turn and
// retries in the background, with a growing pause, until it does or the
// session ends (and the key with it).
func (l *Locker) release(ctx context.Context, key string, m *concurrency.Mutex) error {
	if err := l.unlockOnce(ctx, m); err == nil {
		l.gates.leave(key)
		return nil
	} else {
		l.bg(func() { l.retryRelease(key, m) })
		return err
	}
}

func (l *Locker) unlockOnce(ctx context.Context, m *concurrency.Mutex) error {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.nodeTimeout)
	defer cancel()
	key := m.Key()
	_, err := l.cli.Delete(clientv3.WithRequireLeader(uctx), key)
	return err
}

// retryRelease retries a delete until it succeeds or the session ends.
func (l *Locker) retryRelease(key string, m *concurrency.Mutex) {
	defer l.gates.leave(key)
	for pause := l.cfg.nodeTimeout; ; pause = min(2*pause, l.cfg.ttl/3) {
		s := l.sessionOf()
		if s == nil || !s.live() || wait.Sleep(l.ctx, pause) != nil {
			return
		}
		if l.unlockOnce(l.ctx, m) == nil {
			return
		}
	}
}

// sessionOf returns the current session (nil when none).
func (l *Locker) sessionOf() *session {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sess
}

// lockError maps a failed acquisition to package lease's sentinels.
func (l *Locker) lockError(ctx context.Context, name string, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("etcdlock: lock %q: %w", name, ctx.Err())
	case errors.Is(err, lease.ErrClosed), errors.Is(err, lease.ErrQuorumUnavailable):
		return fmt.Errorf("etcdlock: lock %q: %w", name, err)
	case errors.Is(err, concurrency.ErrLocked):
		return fmt.Errorf("etcdlock: lock %q: %w", name, lease.ErrNotAcquired)
	case errors.Is(err, context.DeadlineExceeded) && l.reachable(ctx, name):
		return fmt.Errorf("etcdlock: lock %q: %w: still held after %v", name, lease.ErrNotAcquired, l.cfg.maxWait)
	}
	return fmt.Errorf("etcdlock: lock %q: %w: %w", name, lease.ErrQuorumUnavailable, err)
}

// reachable reports whether etcd answers a read with a leader, within the
// node timeout: whether a wait that ran out met contention or an outage.
func (l *Locker) reachable(ctx context.Context, key string) bool {
	rctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(context.WithoutCancel(ctx)), l.cfg.nodeTimeout)
	defer cancel()
	_, err := l.cli.Get(rctx, l.cfg.prefix+key, clientv3.WithCountOnly())
	return err == nil
}

// isLeaseGone reports whether etcd answered that a lease does not exist.
func isLeaseGone(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(err, rpctypes.ErrGRPCLeaseNotFound)
}

func resultOf(err error) lease.Result {
	switch {
	case err == nil:
		return lease.ResultAcquired
	case errors.Is(err, lease.ErrNotAcquired):
		return lease.ResultNotAcquired
	case errors.Is(err, lease.ErrQuorumUnavailable):
		return lease.ResultUnavailable
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return lease.ResultCanceled
	}
	return lease.ResultError
}
