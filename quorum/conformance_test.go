package quorum_test

import (
	"context"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/devtools/locktest"
	"github.com/quorumlock/quorumlock/quorum"
)

// The lease API's conformance suite, the one etcdlock passes too.
func TestConformance(t *testing.T) {
	r := newRig(t)
	fences := &memFencer{} // one sequence per key for every Locker, as a database's would be
	locktest.Run(t, locktest.Backend{
		TTL: slow(6 * time.Second), // above twice the rig's node timeout, under -race too
		New: func(t *testing.T, ttl, maxWait time.Duration) locktest.Locker {
			return conformant{r.locker(t, quorum.WithTTL(ttl), quorum.WithMaxWait(maxWait), quorum.WithFencer(fences))}
		},
		Drop: func(t *testing.T, lease locktest.Lease) {
			for _, k := range lease.Keys() {
				for i := range r.admin {
					if err := r.admin[i].Del(ctxT(t, 10*time.Second), k).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
		},
	})
}

// conformant is a quorum.Locker as the suite sees it.
type conformant struct{ *quorum.Locker }

func asLease(l *quorum.Lease, err error) (locktest.Lease, error) {
	if err != nil {
		return nil, err
	}
	return l, nil
}

func (c conformant) Lock(ctx context.Context, key string) (locktest.Lease, error) {
	return asLease(c.Locker.Lock(ctx, key))
}

func (c conformant) TryLock(ctx context.Context, key string) (locktest.Lease, error) {
	return asLease(c.Locker.TryLock(ctx, key))
}

func (c conformant) LockMulti(ctx context.Context, keys ...string) (locktest.Lease, error) {
	return asLease(c.Locker.LockMulti(ctx, keys...))
}

func (c conformant) TryLockMulti(ctx context.Context, keys ...string) (locktest.Lease, error) {
	return asLease(c.Locker.TryLockMulti(ctx, keys...))
}

func (c conformant) Do(ctx context.Context, key string, fn func(context.Context, locktest.Lease) error) error {
	return c.Locker.Do(ctx, key, func(ctx context.Context, l *quorum.Lease) error { return fn(ctx, l) })
}
