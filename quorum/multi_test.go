package quorum_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"

	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/quorum"
)

// multiKeys returns n keys of the test.
func multiKeys(t testing.TB, n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("%s:%d", key(t), i)
	}
	return ks
}

// TestLockMulti: one lease on several keys, all or nothing on every node.
func TestLockMulti(t *testing.T) {
	r := newRig(t)

	t.Run("SortsAndSetsEveryKeyOnEveryNode", func(t *testing.T) {
		f := &memFencer{}
		l := r.locker(t, quorum.WithTTL(5*time.Minute), quorum.WithFencer(f), quorum.WithNodeTimeout(time.Minute))
		ks := multiKeys(t, 3)
		le, err := l.LockMulti(ctxT(t, 10*time.Second), ks[2], ks[0], ks[1], ks[0])
		if err != nil {
			t.Fatal(err)
		}
		if got := le.Keys(); !slices.Equal(got, ks) || le.Key() != ks[0] {
			t.Fatalf("Keys() = %q, Key() = %q; want %q sorted, duplicates once", got, le.Key(), ks)
		}
		for _, k := range ks {
			eventually(t, time.Minute, k+" is on every node", func() bool { return r.count(t, k, le.Token()) == 5 })
			if le.FenceOf(k) != 1 {
				t.Fatalf("FenceOf(%s) = %d, want 1: each key has its own sequence", k, le.FenceOf(k))
			}
		}
		if le.FenceOf("not-a-key-of-the-lease") != 0 {
			t.Fatal("FenceOf an unknown key is not 0")
		}
		if err := le.Extend(ctxT(t, 10*time.Second), 4*time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := le.Unlock(ctxT(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		for _, k := range ks {
			eventually(t, time.Minute, k+" is gone from every node", func() bool { return r.count(t, k, "") == 5 })
		}
	})

	t.Run("BadKeysAreRefused", func(t *testing.T) {
		l := r.locker(t)
		for _, ks := range [][]string{nil, {"a", ""}, {"a", quorum.BootMarkerKey}} {
			if _, err := l.TryLockMulti(ctxT(t, 5*time.Second), ks...); err == nil {
				t.Fatalf("LockMulti(%q) succeeded", ks)
			}
		}
	})

	t.Run("OneHeldKeyRefusesTheWholeLeaseAndLeavesNothing", func(t *testing.T) {
		l := r.locker(t)
		ks := multiKeys(t, 3)
		holder := r.hold(t, ks[1])
		_, err := l.TryLockMulti(ctxT(t, 10*time.Second), ks...)
		if !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("got %v, want ErrNotAcquired", err)
		}
		for _, k := range []string{ks[0], ks[2]} {
			if got := r.values(t, k); slices.ContainsFunc(got, func(v string) bool { return v != "" }) {
				t.Fatalf("a refused lease left %s behind: %q", k, got)
			}
		}
		if r.count(t, ks[1], holder.Token()) != 5 {
			t.Fatal("the refused lease disturbed the holder")
		}
	})

	t.Run("NodesThatRefuseOneKeySetNone", func(t *testing.T) {
		l := r.locker(t, quorum.WithTTL(5*time.Minute), quorum.WithNodeTimeout(time.Minute))
		ks := multiKeys(t, 2)
		r.setOn(t, ks[1], "other", 5*time.Minute, 0, 1) // a minority holds one key
		le, err := l.LockMulti(ctxT(t, 10*time.Second), ks...)
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, "the lease is on nodes 2-4", func() bool { return r.count(t, ks[0], le.Token()) == 3 })
		if got := r.values(t, ks[0]); got[0] != "" || got[1] != "" {
			t.Fatalf("nodes 0 and 1 refused %s but set %s: %q", ks[1], ks[0], got)
		}
		_ = le.Unlock(ctxT(t, 10*time.Second))
	})

	t.Run("WaiterOnOneKeyWakesOnTheLeaseRelease", func(t *testing.T) {
		ks := multiKeys(t, 2)
		holder := r.locker(t, quorum.WithTTL(5*time.Minute))
		l := r.locker(t, patient()...)
		held, err := holder.LockMulti(ctxT(t, 10*time.Second), ks...)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		ctx := ctxT(t, slow(time.Minute))
		go func() {
			le, err := l.Lock(ctx, ks[1])
			if err == nil {
				err = le.Unlock(context.Background())
			}
			got <- err
		}()
		eventually(t, 10*time.Second, "the waiter subscribed", func() bool { return l.SubscribedBy(ks[1]) >= 3 })
		if err := held.Unlock(ctxT(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal("the waiter was not woken by the multi-key release")
		}
	})
}

// TestLockMultiLosesAKey: a multi-key lease holds only while a majority
// holds every key. Deleting one key on three nodes loses it for Extend and
// for Do's watchdog.
func TestLockMultiLosesAKey(t *testing.T) {
	r := newRig(t)
	drop := func(t *testing.T, k string) {
		for _, i := range []int{0, 2, 4} {
			if err := r.admin[i].Del(ctxT(t, 10*time.Second), k).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}

	t.Run("Extend", func(t *testing.T) {
		l := r.locker(t, quorum.WithTTL(5*time.Minute), quorum.WithNodeTimeout(time.Minute))
		ks := multiKeys(t, 3)
		le, err := l.LockMulti(ctxT(t, 10*time.Second), ks...)
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, "the token is on every node", func() bool { return r.count(t, ks[2], le.Token()) == 5 })
		drop(t, ks[1])
		if err := le.Extend(ctxT(t, time.Minute), 4*time.Minute); !errors.Is(err, lease.ErrLeaseLost) {
			t.Fatalf("Extend: got %v, want ErrLeaseLost", err)
		}
		waitClosed(t, le.Lost(), time.Second, "Lost is closed")
		if ttl := r.admin[1].PTTL(ctxT(t, 10*time.Second), ks[0]).Val(); ttl > 5*time.Minute {
			t.Fatalf("the failed extension moved a key's TTL to %v", ttl)
		}
		_ = le.Unlock(ctxT(t, 10*time.Second))
	})

	t.Run("Do", func(t *testing.T) {
		// The watchdog extends every 2 s; the TTL leaves the loss to it.
		l := r.locker(t, quorum.WithTTL(time.Minute), quorum.WithWatchdogInterval(2*time.Second))
		ks := multiKeys(t, 2)
		err := l.DoMulti(ctxT(t, slow(time.Minute)), ks, func(ctx context.Context, le lease.Lease) error {
			eventually(t, time.Minute, "the token is on every node", func() bool { return r.count(t, ks[1], le.Token()) == 5 })
			drop(t, ks[0])
			<-ctx.Done()
			if !errors.Is(context.Cause(ctx), lease.ErrLeaseLost) {
				return fmt.Errorf("fn's context ended with %w, not the loss", context.Cause(ctx))
			}
			return nil
		})
		if !errors.Is(err, lease.ErrLeaseLost) {
			t.Fatalf("DoMulti: got %v, want ErrLeaseLost", err)
		}
	})
}

// TestLockMultiOverlapping: leases whose key sets overlap, named in
// opposite orders, from three Lockers (three instances) at once: every
// call is answered within the wait budget, nobody deadlocks, and no two
// leases ever hold one key at the same time.
func TestLockMultiOverlapping(t *testing.T) {
	r := newRig(t)
	ks := multiKeys(t, 4)
	sets := [][]string{
		{ks[0], ks[1], ks[2]}, {ks[2], ks[1], ks[0]}, {ks[1], ks[3]}, {ks[3], ks[0]},
	}
	const rounds = 8
	var (
		inside [4]atomic.Int32
		bad    atomic.Int32
		wg     sync.WaitGroup
		errs   = make(chan error, 3*len(sets)*rounds)
	)
	enter := func(set []string, d int32) {
		for _, k := range set {
			i := slices.Index(ks, k)
			if n := inside[i].Add(d); n > 1 {
				bad.Add(1)
			}
		}
	}
	for range 3 {
		l := r.locker(t, quorum.WithTTL(time.Minute), quorum.WithMaxWait(slow(time.Minute)))
		for _, set := range sets {
			wg.Go(func() {
				for range rounds {
					err := l.DoMulti(ctxT(t, slow(2*time.Minute)), set, func(ctx context.Context, _ lease.Lease) error {
						enter(set, 1)
						time.Sleep(time.Millisecond)
						enter(set, -1)
						return nil
					})
					if err != nil {
						errs <- err
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if bad.Load() > 0 {
		t.Fatalf("%d times two leases held one key at once", bad.Load())
	}
}

// TestLockMultiExcludesRedsync: a redsync mutex on any one key of a
// multi-key lease excludes the lease and is excluded by it.
func TestLockMultiExcludesRedsync(t *testing.T) {
	r := newRig(t)
	pools := make([]rsredis.Pool, len(r.clients))
	for i, c := range r.clients {
		pools[i] = goredis.NewPool(c)
	}
	rs := redsync.New(pools...)
	l := r.locker(t, quorum.WithTTL(5*time.Minute), quorum.WithNodeTimeout(time.Minute))
	ks := multiKeys(t, 3)

	m := rs.NewMutex(ks[1], redsync.WithExpiry(5*time.Minute), redsync.WithTries(1))
	if err := m.LockContext(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryLockMulti(ctxT(t, 10*time.Second), ks...); !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("TryLockMulti while redsync holds one key: %v", err)
	}
	if ok, err := m.UnlockContext(ctxT(t, 10*time.Second)); !ok || err != nil {
		t.Fatalf("redsync unlock: %v %v", ok, err)
	}
	le, err := l.TryLockMulti(ctxT(t, 10*time.Second), ks...)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the lease is on every node", func() bool { return r.count(t, ks[2], le.Token()) == 5 })
	m2 := rs.NewMutex(ks[2], redsync.WithExpiry(time.Minute), redsync.WithTries(1))
	if err := m2.LockContext(ctxT(t, time.Minute)); err == nil {
		t.Fatal("redsync took a key of a held multi-key lease")
	}
	if err := le.Unlock(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// TestLockMultiRestartGuard: a node that restarts empty during a multi-key
// lease held on exactly a majority does not vote for another lease on any
// of its keys inside the window.
func TestLockMultiRestartGuard(t *testing.T) {
	const ttl = 5 * time.Minute
	r := newRig(t)
	opts := []quorum.Option{quorum.WithTTL(ttl), quorum.WithAmnesiaWindow(ttl)}
	first, second := r.locker(t, opts...), r.locker(t, opts...)
	ks := multiKeys(t, 2)
	heal := r.partition(t, 3, 4)
	le, err := first.LockMulti(ctxT(t, 10*time.Second), ks...)
	if err != nil {
		t.Fatal(err)
	}
	heal()
	restartEmpty(t, r, 2)
	warming := false
	for i := range 10 {
		if time.Until(le.Until()) < time.Second {
			t.Fatalf("the first lease ran out after %d tries", i)
		}
		var got lease.Lease
		if i%2 == 0 {
			got, err = second.TryLockMulti(ctxT(t, 10*time.Second), ks[1], ks[0])
		} else {
			got, err = second.TryLock(ctxT(t, 10*time.Second), ks[1])
		}
		if err == nil {
			t.Fatalf("double grant: %q and %q; values %q", le.Token(), got.Token(), r.values(t, ks[1]))
		}
		warming = warming || errors.Is(err, quorum.ErrNodeWarming)
		time.Sleep(50 * time.Millisecond)
	}
	if !warming {
		t.Fatal("node 2 never answered warming: the guard did not act")
	}
	if err := le.Unlock(ctxT(t, 10*time.Second)); !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("Unlock: got %v, want ErrLeaseLost (the lease was left on 2 nodes)", err)
	}
}
