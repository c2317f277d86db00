package etcdlock_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quorumlock/quorumlock/devtools/locktest"
	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/devtools/testbed/etcdbed"
	"github.com/quorumlock/quorumlock/etcdlock"
)

// newClient returns a client of the bed's cluster, closed when the test
// ends (after the Lockers, which the test closes first).
func newClient(t *testing.T, bed *testbed.Bed) *clientv3.Client {
	t.Helper()
	cli, err := etcdbed.Client(bed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// newLocker returns a Locker on its own client, closed when the test ends.
func newLocker(t *testing.T, bed *testbed.Bed, opts ...etcdlock.Option) *etcdlock.Locker {
	t.Helper()
	l, err := etcdlock.New(newClient(t, bed), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// The lease API's conformance suite, the one quorum passes too, on a
// 3-member cluster.
func TestConformance(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Etcd: 3})
	admin := newClient(t, bed)
	locktest.Run(t, locktest.Backend{
		TTL: 6 * time.Second,
		New: func(t *testing.T, ttl, maxWait time.Duration) locktest.Locker {
			return conformant{newLocker(t, bed, etcdlock.WithTTL(ttl), etcdlock.WithMaxWait(maxWait))}
		},
		Drop: func(t *testing.T, lease locktest.Lease) {
			if _, err := admin.Revoke(ctxT(t), leaseID(t, lease.(*etcdlock.Lease))); err != nil {
				t.Fatal(err)
			}
		},
	})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// leaseID reads the session's etcd lease from the lease's recipe key
// (prefix + key + "/" + the lease id in hex).
func leaseID(t *testing.T, lease *etcdlock.Lease) clientv3.LeaseID {
	tok := lease.Token()
	id, err := strconv.ParseInt(tok[strings.LastIndexByte(tok, '/')+1:], 16, 64)
	if err != nil {
		t.Fatalf("token %q: %v", tok, err)
	}
	return clientv3.LeaseID(id)
}

// conformant is an etcdlock.Locker as the suite sees it.
type conformant struct{ *etcdlock.Locker }

func asLease(l *etcdlock.Lease, err error) (locktest.Lease, error) {
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
	return c.Locker.Do(ctx, key, func(ctx context.Context, l *etcdlock.Lease) error { return fn(ctx, l) })
}

// A lease on a Locker with etcd's shortest TTL stays held while nothing
// happens: the Locker's view of the validity keeps up with the keep-alive.
// (An earlier view, from the answers' arrival times alone, ended such
// sessions by itself within one TTL.)
func TestShortTTLLeaseStaysHeld(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Etcd: 3})
	l := newLocker(t, bed, etcdlock.WithTTL(2*time.Second))
	lease, err := l.TryLock(ctxT(t), "short-ttl")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease.Lost():
		t.Fatalf("an idle lease with a 2s TTL was lost: %v", lease.Err())
	case <-time.After(7 * time.Second): // three and a half TTLs
	}
	if !time.Now().Before(lease.Until()) {
		t.Fatalf("Until %v is in the past", lease.Until())
	}
	if err := lease.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}
