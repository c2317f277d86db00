package etcdlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/etcdlock"
	"github.com/quorumlock/quorumlock/lease"
)

const sessionTTL = 4 * time.Second

// grant is the outcome of a Lock call made in the background.
type grant struct {
	at  time.Time
	le  lease.Lease
	err error
}

// lockLater calls l.Lock(key) in the background; the answer arrives on the
// channel. The test unlocks what it is granted.
func lockLater(t *testing.T, l *etcdlock.Locker, key string) <-chan grant {
	t.Helper()
	ch := make(chan grant, 1)
	go func() {
		le, err := l.Lock(ctxT(t), key)
		ch <- grant{at: time.Now(), le: le, err: err}
	}()
	return ch
}

// awaitGrant waits up to d for g's answer, failing the test when none comes.
func awaitGrant(t *testing.T, g <-chan grant, d time.Duration) grant {
	t.Helper()
	select {
	case r := <-g:
		if r.err != nil {
			t.Fatalf("lock: %v", r.err)
		}
		t.Cleanup(func() { _ = r.le.Unlock(context.Background()) })
		return r
	case <-time.After(d):
		t.Fatalf("no grant within %v", d)
	}
	return grant{}
}

// The etcd client gives a lease's keep-alive up once its last answer is a
// TTL old: after a pause of the process, say, whose last refresh of the
// Locker's own (Until's source) was answered later than the client's. etcd
// still holds the lease then, and the holder, by its Until, holds the key.
// Its session must not end with the client's keep-alive: the key stays its
// own, and no other owner is handed it, while the Locker's refreshes keep
// the lease. (The session used to end and revoke its etcd lease at once,
// so the key went to another owner up to a TTL before the holder's Until:
// the double grant of the etcd member-restart and clock-jump chaos rows.)
func TestClientKeepAliveEndingLosesNothing(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Etcd: 3})
	holderCli := newClient(t, bed)
	holder, err := etcdlock.New(holderCli, etcdlock.WithTTL(sessionTTL), etcdlock.WithNodeTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Close() })
	le, err := holder.TryLock(ctxT(t), "kept")
	if err != nil {
		t.Fatal(err)
	}
	// End every keep-alive stream of the holder's client, as its deadline
	// check ends a lease's: the session's keep-alive channel closes while
	// etcd still holds the lease.
	if err := holderCli.Lease.Close(); err != nil {
		t.Fatal(err)
	}
	until := le.Until()
	other := newLocker(t, bed, etcdlock.WithTTL(sessionTTL), etcdlock.WithMaxWait(time.Minute))
	g := lockLater(t, other, "kept")
	select {
	case r := <-g:
		if r.err == nil {
			_ = r.le.Unlock(ctxT(t))
		}
		t.Fatalf("another owner was granted the key (lock error %v) while the holder's lease was %v, its Until %v after the grant",
			r.err, le.Err(), le.Until().Sub(r.at).Round(time.Millisecond))
	case <-time.After(3 * sessionTTL):
	}
	if err := le.Err(); err != nil {
		t.Fatalf("the lease ended with the client's keep-alive: %v", err)
	}
	if !le.Until().After(until.Add(2 * sessionTTL)) {
		t.Fatalf("Until moved from %v to %v in 3 TTLs: the Locker's refreshes stopped", until, le.Until())
	}
	if err := le.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	awaitGrant(t, g, sessionTTL)
}

// A session that the Locker ends itself while etcd still holds its lease
// (here: a Lock call finds its own recipe key gone, the sign of a session
// etcd no longer knows, and retries on a new session) leaves its other
// keys to their holders until the Until those holders last saw: a holder
// that is paused cannot hear of the loss. (The Locker used to revoke the
// etcd lease at once, handing the keys to the next owners before then.)
func TestEndedSessionKeepsKeysUntilUntil(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Etcd: 3})
	admin := newClient(t, bed)
	holder := newLocker(t, bed, etcdlock.WithTTL(sessionTTL), etcdlock.WithMaxWait(time.Minute))
	other := newLocker(t, bed, etcdlock.WithTTL(sessionTTL), etcdlock.WithMaxWait(time.Minute))
	held, err := holder.TryLock(ctxT(t), "held")
	if err != nil {
		t.Fatal(err)
	}
	busy, err := other.TryLock(ctxT(t), "busy")
	if err != nil {
		t.Fatal(err)
	}
	// The holder queues for "busy"; its recipe key there is deleted behind
	// its back, so once "busy" is free its Lock finds its own key gone.
	retried := lockLater(t, holder, "busy")
	deleteWaiterKey(t, admin, "quorumlock/busy/", busy.Fence(), busy.Token())
	if err := busy.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	awaitGrant(t, retried, sessionTTL)
	select {
	case <-held.Lost():
	case <-time.After(sessionTTL):
		t.Fatal("the lease on the ended session was not lost")
	}
	if !errors.Is(held.Err(), lease.ErrLeaseLost) {
		t.Fatalf("lease error %v, want ErrLeaseLost", held.Err())
	}
	until := held.Until()
	r := awaitGrant(t, lockLater(t, other, "held"), 2*sessionTTL)
	if r.at.Before(until) {
		t.Fatalf("another owner was granted the key %v before the lost lease's Until %v", until.Sub(r.at).Round(time.Millisecond), until)
	}
}

// deleteWaiterKey waits for a recipe key under prefix other than owner's
// (watching from the revision at or before the waiter's put) and deletes
// it.
func deleteWaiterKey(t *testing.T, admin *clientv3.Client, prefix string, from int64, owner string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sessionTTL)
	defer cancel()
	for wr := range admin.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(from)) {
		for _, ev := range wr.Events {
			if k := string(ev.Kv.Key); ev.Type == clientv3.EventTypePut && k != owner {
				if _, err := admin.Delete(ctxT(t), k); err != nil {
					t.Fatal(err)
				}
				return
			}
		}
	}
	t.Fatalf("no waiter key under %s within %v", prefix, sessionTTL)
}
