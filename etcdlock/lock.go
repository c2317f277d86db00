package etcdlock

import (
	"context"
	"errors"
	"slices"
	"strings"

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
	if len(keys) == 0 || slices.Contains(keys, "") {
		return nil, errors.New("etcdlock: empty key")
	}
	g := &grant{op: "lock", name: strings.Join(keys, ",")}
	if wait {
		g.maxWait = l.cfg.maxWait
	}
	for _, k := range keys {
		g.claims = append(g.claims, l.lockClaim(k, wait))
	}
	return l.granted(ctx, g)
}

// lockClaim claims key with the recipe's mutex: the fence is the revision
// of the answer that found no predecessor.
func (l *Locker) lockClaim(key string, wait bool) claim {
	return func(ctx context.Context, s *session) (claimed, error) {
		m, err := l.acquire(ctx, s, key, wait)
		if err != nil {
			return claimed{}, err
		}
		return claimed{key: key, owner: m.Key(), gate: key, rev: m.Header().Revision, fenceKey: key}, nil
	}
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
			_ = l.release(context.Background(), claimed{owner: m.Key(), gate: key})
			return
		}
		l.gates.leave(key)
	})
	return ctx.Err()
}

// release deletes a key the lease holds within the node timeout and gives
// its turn back; when etcd does not confirm, it keeps the turn and retries
// in the background, with a growing pause, until it does or the session
// ends (and the key with it).
func (l *Locker) release(ctx context.Context, h claimed) error {
	err := l.unlockOnce(ctx, h)
	if err != nil {
		l.bg(func() { l.retryRelease(h) })
		return err
	}
	l.leave(h)
	return nil
}

// leave gives back the turn h holds in the Locker's gates, if any.
func (l *Locker) leave(h claimed) {
	if h.gate != "" {
		l.gates.leave(h.gate)
	}
}

// unlockOnce deletes h's etcd key; a key that another owner holds now
// (h.cmp fails: it went with the session and was taken again) is left.
func (l *Locker) unlockOnce(ctx context.Context, h claimed) error {
	uctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(context.WithoutCancel(ctx)), l.cfg.nodeTimeout)
	defer cancel()
	if h.cmp == nil {
		_, err := l.cli.Delete(uctx, h.owner)
		return err
	}
	_, err := l.cli.Txn(uctx).If(*h.cmp).Then(clientv3.OpDelete(h.owner)).Commit()
	return err
}

// retryRelease retries a delete until it succeeds or the session ends.
func (l *Locker) retryRelease(h claimed) {
	defer l.leave(h)
	for pause := l.cfg.nodeTimeout; ; pause = min(2*pause, l.cfg.ttl/3) {
		s := l.sessionOf()
		if s == nil || !s.live() || wait.Sleep(l.ctx, pause) != nil {
			return
		}
		if l.unlockOnce(l.ctx, h) == nil {
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
