package etcdlock

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/quorumlock/quorumlock/lease"
)

var _ lease.RWLock = (*RWLock)(nil)

// RWLock admits many readers or one writer on etcd, ordered by their keys'
// create revisions (see the package documentation). Its methods are safe
// for concurrent use.
type RWLock struct {
	l       *Locker
	name    string
	pfx     string // every holder's and waiter's key: prefix + name + "/"
	writers string // the writers' keys: pfx + "w/"
}

// RWLock returns the read-write lock called name. A reader puts the etcd
// key prefix + name + "/r/" + a unique suffix (the session's lease id in
// hex, a dash, a sequence number), a writer the same under "/w/"; the
// lease's Key is name, its Token that etcd key. A reader holds once no
// writer's key is older than its own, a writer once no key is: so a
// waiting writer stops the readers that come after it. A reader's Fence is
// 0 (readers do not exclude one another); a writer's is the revision at
// which it became the holder, or the Fencer's token on name. A name is one
// primitive's: do not use it for a lock, a semaphore or an election too.
func (l *Locker) RWLock(name string) (lease.RWLock, error) {
	if name == "" {
		return nil, errors.New("etcdlock: read-write lock: empty name")
	}
	pfx := l.cfg.prefix + name + "/"
	return &RWLock{l: l, name: name, pfx: pfx, writers: pfx + "w/"}, nil
}

// Name returns the lock's name.
func (rw *RWLock) Name() string { return rw.name }

// RLock takes a read lease, waiting while a writer holds the lock or waits
// for it, until ctx ends or WithMaxWait passes; the errors are Lock's.
func (rw *RWLock) RLock(ctx context.Context) (lease.Lease, error) {
	return held(rw.take(ctx, true, true))
}

// TryRLock makes one attempt at a read lease: lease.ErrNotAcquired when a
// writer holds the lock or waits for it.
func (rw *RWLock) TryRLock(ctx context.Context) (lease.Lease, error) {
	return held(rw.take(ctx, true, false))
}

// Lock takes the write lease, waiting while readers or a writer hold the
// lock or wait before it, until ctx ends or WithMaxWait passes.
func (rw *RWLock) Lock(ctx context.Context) (lease.Lease, error) {
	return held(rw.take(ctx, false, true))
}

// TryLock makes one attempt at the write lease: lease.ErrNotAcquired when
// anyone holds the lock or waits for it.
func (rw *RWLock) TryLock(ctx context.Context) (lease.Lease, error) {
	return held(rw.take(ctx, false, false))
}

// RDo runs fn under a read lease, like Locker.Do.
func (rw *RWLock) RDo(ctx context.Context, fn func(ctx context.Context, l lease.Lease) error) error {
	return rw.l.do(ctx, fn, func() (*Lease, error) { return rw.take(ctx, true, true) })
}

// Do runs fn under the write lease, like Locker.Do.
func (rw *RWLock) Do(ctx context.Context, fn func(ctx context.Context, l lease.Lease) error) error {
	return rw.l.do(ctx, fn, func() (*Lease, error) { return rw.take(ctx, false, true) })
}

// take takes a read or write lease, waiting for it or not.
func (rw *RWLock) take(ctx context.Context, read, wait bool) (*Lease, error) {
	g := &grant{op: "lock", name: rw.name, claims: []claim{rw.claim(read, wait)}}
	if read {
		g.op = "read-lock"
	}
	if wait {
		g.maxWait = rw.l.cfg.maxWait
	}
	return rw.l.granted(ctx, g)
}

// claim puts the caller's key and reads the oldest key that may stop it
// (a writer's for a reader, anyone's for a writer) in one transaction; if
// that key is older than its own, it waits for the older ones to go, or
// (not waiting) takes its key back.
func (rw *RWLock) claim(read, wait bool) claim {
	return func(ctx context.Context, s *session) (claimed, error) {
		own, before, kind := rw.pfx+"w/", rw.pfx, "w"
		if read {
			own, before, kind = rw.pfx+"r/", rw.writers, "r"
		}
		own += fmt.Sprintf("%x-%d", s.cs.Lease(), rw.l.seq.Add(1))
		tctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), rw.l.cfg.nodeTimeout)
		resp, err := rw.l.cli.Txn(tctx).Then(clientv3.OpPut(own, kind, clientv3.WithLease(s.cs.Lease())),
			clientv3.OpGet(before, clientv3.WithFirstCreate()...)).Commit()
		cancel()
		if err != nil {
			return claimed{}, err
		}
		rev := resp.Header.Revision
		cmp := clientv3.Compare(clientv3.CreateRevision(own), "=", rev)
		c := claimed{key: rw.name, owner: own, cmp: &cmp, rev: rev, fenceKey: rw.name}
		if read {
			c.rev, c.fenceKey = 0, ""
		}
		if first := resp.Responses[1].GetResponseRange().Kvs; len(first) == 0 || first[0].CreateRevision >= rev {
			return c, nil
		}
		if !wait {
			_ = rw.l.release(ctx, c)
			return claimed{}, concurrency.ErrLocked
		}
		at, err := rw.await(ctx, own, before, rev)
		if err != nil {
			_ = rw.l.release(ctx, c)
			return claimed{}, err
		}
		if !read {
			c.rev = at
		}
		return c, nil
	}
}

// await waits until no key under before older than rev is left, then
// checks that own (put at rev) is still there: the revision at which it
// saw it, or concurrency.ErrSessionExpired when it went with its session.
func (rw *RWLock) await(ctx context.Context, own, before string, rev int64) (int64, error) {
	ctx = clientv3.WithRequireLeader(ctx)
	if err := rw.l.waitDeletes(ctx, before, rev-1); err != nil {
		return 0, err
	}
	tctx, cancel := context.WithTimeout(ctx, rw.l.cfg.nodeTimeout)
	defer cancel()
	resp, err := rw.l.cli.Get(tctx, own)
	switch {
	case err != nil:
		return 0, err
	case len(resp.Kvs) == 0:
		return 0, concurrency.ErrSessionExpired
	}
	return resp.Header.Revision, nil
}

// waitDeletes waits until no key under pfx created at maxRev or before is
// left, watching the deletion of the youngest of them at a time, until
// ctx ends.
func (l *Locker) waitDeletes(ctx context.Context, pfx string, maxRev int64) error {
	opts := append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(maxRev))
	for {
		resp, err := l.cli.Get(ctx, pfx, opts...)
		if err != nil {
			return err
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		if err := l.waitDelete(ctx, string(resp.Kvs[0].Key), resp.Header.Revision); err != nil {
			return err
		}
	}
}

// waitDelete waits until key is deleted after revision rev, or ctx ends.
// A watch that etcd ended returns nil: the caller looks again.
func (l *Locker) waitDelete(ctx context.Context, key string, rev int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for wr := range l.cli.Watch(wctx, key, clientv3.WithRev(rev+1), clientv3.WithFilterPut()) {
		if wr.Err() != nil || len(wr.Events) > 0 {
			return nil
		}
	}
	return ctx.Err()
}
