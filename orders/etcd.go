package orders

import (
	"context"
	"strings"

	"github.com/quorumlock/quorumlock/etcdlock"
	"github.com/quorumlock/quorumlock/quorum"
)

// EtcdLocker adapts an etcdlock.Locker to Locker: the consensus backend.
// Its errors match quorum's sentinels, so they map to the orders ones as
// QuorumLocker's do. Give it the same fencing.Reserver (etcdlock.WithFencer)
// as the quorum backend: the stock rows are also written by transactions
// that arbitrate without the lock, so every writer must draw its fences
// from the one Postgres sequence (etcd's revisions are not in it).
func EtcdLocker(l *etcdlock.Locker) Locker { return etcdLocker{l} }

type etcdLocker struct{ l *etcdlock.Locker }

func (e etcdLocker) Lock(ctx context.Context, keys ...string) (Lease, error) {
	lease, err := e.l.LockMulti(ctx, keys...)
	if err != nil {
		return nil, lockError(err)
	}
	return etcdLease{lease}, nil
}

type etcdLease struct{ l *etcdlock.Lease }

func (e etcdLease) FenceOf(key string) int64 { return e.l.FenceOf(key) }

func (e etcdLease) Unlock(ctx context.Context) error { return unlockError(e.l.Unlock(ctx)) }

func (e etcdLease) Detail() LeaseDetail {
	return LeaseDetail{Key: strings.Join(e.l.Keys(), ","), TokenDigest: quorum.TokenDigest(e.l.Token()), Fence: e.l.Fence(), Until: e.l.Until()}
}
