// Package etcdbackend adapts an etcdlock.Locker to the orders service's
// Locker: the consensus backend of the stock lock. It is apart from package
// orders so that a service built without it links neither etcd's client
// nor gRPC.
package etcdbackend

import (
	"context"
	"strings"

	"github.com/quorumlock/quorumlock/etcdlock"
	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/orders"
)

// Locker adapts l to orders.Locker. Its errors match package lease's sentinels,
// so they map to the orders ones as orders.QuorumLocker's do. Give it the
// same fencing.Reserver (etcdlock.WithFencer) as the quorum backend: the
// stock rows are also written by transactions that arbitrate without the
// lock, so every writer must draw its fences from the one Postgres
// sequence (etcd's revisions are not in it).
func Locker(l *etcdlock.Locker) orders.Locker { return locker{l} }

type locker struct{ l *etcdlock.Locker }

func (e locker) Lock(ctx context.Context, keys ...string) (orders.Lease, error) {
	l, err := e.l.LockMulti(ctx, keys...)
	if err != nil {
		return nil, orders.LockError(err)
	}
	return heldLease{l}, nil
}

type heldLease struct{ l lease.Lease }

func (e heldLease) FenceOf(key string) int64 { return e.l.FenceOf(key) }

func (e heldLease) Unlock(ctx context.Context) error { return orders.UnlockError(e.l.Unlock(ctx)) }

func (e heldLease) Detail() orders.LeaseDetail {
	return orders.LeaseDetail{Key: strings.Join(e.l.Keys(), ","), TokenDigest: lease.TokenDigest(e.l.Token()), Fence: e.l.Fence(), Until: e.l.Until()}
}
