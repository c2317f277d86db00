package quorum_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"

	"github.com/quorumlock/quorumlock/lease"
)

// Behaviour 10: keys are used verbatim with the plain token as value, so
// redsync on the same five nodes and key excludes us and is excluded.
func TestRedsyncInterop(t *testing.T) {
	r := newRig(t)
	pools := make([]rsredis.Pool, len(r.clients))
	for i, c := range r.clients {
		pools[i] = goredis.NewPool(c)
	}
	rs := redsync.New(pools...)
	l := r.locker(t)

	t.Run("RedsyncHoldsWeAreExcluded", func(t *testing.T) {
		k := key(t)
		// The expiry outlasts the checks below on a loaded machine (and
		// sets redsync's per-node timeout to 5% of it).
		m := rs.NewMutex(k, redsync.WithExpiry(5*time.Minute), redsync.WithTries(1))
		if err := m.LockContext(ctxT(t, time.Minute)); err != nil {
			t.Fatal(err)
		}
		if got := r.count(t, k, m.Value()); got < 3 {
			t.Fatalf("redsync holds %d nodes", got)
		}
		_, err := l.TryLock(ctxT(t, 5*time.Second), k)
		if !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("TryLock while redsync holds the key: %v", err)
		}
		if got := r.count(t, k, m.Value()); got < 3 {
			t.Fatalf("our failed attempt disturbed redsync's lock: values %q", r.values(t, k))
		}
		if ok, err := m.UnlockContext(ctxT(t, 5*time.Second)); !ok || err != nil {
			t.Fatalf("redsync unlock: %v %v", ok, err)
		}
		le, err := l.TryLock(ctxT(t, 5*time.Second), k)
		if err != nil {
			t.Fatalf("TryLock after redsync released: %v", err)
		}
		if err := le.Unlock(ctxT(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("WeHoldRedsyncIsExcluded", func(t *testing.T) {
		k := key(t)
		// Our lease is on every node and outlasts the checks below on a
		// loaded machine.
		le := r.hold(t, k)
		m := rs.NewMutex(k, redsync.WithExpiry(5*time.Minute), redsync.WithTries(1))
		if err := m.LockContext(ctxT(t, time.Minute)); err == nil {
			t.Fatal("redsync acquired a key we hold")
		}
		// Redsync's compare-and-delete does not remove our token either.
		if ok, _ := rs.NewMutex(k, redsync.WithValue("not-our-token")).UnlockContext(ctxT(t, 5*time.Second)); ok {
			t.Fatal("redsync released our lease with another value")
		}
		if got := r.count(t, k, le.Token()); got != 5 {
			t.Fatalf("values %q: our token is not on every node", r.values(t, k))
		}
		if err := le.Unlock(ctxT(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		if err := m.LockContext(ctxT(t, time.Minute)); err != nil {
			t.Fatalf("redsync after our release: %v", err)
		}
		if _, err := m.UnlockContext(ctxT(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
	})

	// Both clients hammer one key; at no moment do two valid holders exist.
	// Each makes at least 40 attempts, and both keep trying until each has
	// won at least once.
	t.Run("MutualExclusionUnderContention", func(t *testing.T) {
		k := key(t)
		const minAttempts = 40
		var (
			mu       sync.Mutex
			holders  int
			overlap  bool
			grants   [2]int
			attempts [2]int
		)
		// more counts an attempt by who and reports whether it is due: who
		// has made fewer than minAttempts, or a side has not won yet. A
		// side past its own quota that has won waits a little before each
		// further attempt, so that it keeps contending without starving
		// the other.
		more := func(who int) bool {
			mu.Lock()
			due := attempts[who] < minAttempts || grants[0] == 0 || grants[1] == 0
			quota := attempts[who] >= minAttempts && grants[who] > 0
			if due {
				attempts[who]++
			}
			mu.Unlock()
			if due && quota {
				time.Sleep(5 * time.Millisecond)
			}
			return due
		}
		enter := func(who int) {
			mu.Lock()
			holders++
			grants[who]++
			overlap = overlap || holders > 1
			mu.Unlock()
		}
		leave := func() {
			mu.Lock()
			holders--
			mu.Unlock()
		}
		ctx := ctxT(t, time.Minute)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && more(0) {
				le, err := l.TryLock(ctx, k)
				if err != nil {
					continue
				}
				enter(0)
				time.Sleep(2 * time.Millisecond)
				leave()
				_ = le.Unlock(context.WithoutCancel(ctx))
			}
		}()
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && more(1) {
				m := rs.NewMutex(k, redsync.WithExpiry(10*time.Second), redsync.WithTries(1))
				if m.TryLockContext(ctx) != nil {
					continue
				}
				enter(1)
				time.Sleep(2 * time.Millisecond)
				leave()
				_, _ = m.UnlockContext(context.WithoutCancel(ctx))
			}
		}()
		wg.Wait()
		if overlap {
			t.Fatal("a quorum lease and a redsync mutex were held at the same time")
		}
		if grants[0] == 0 || grants[1] == 0 || attempts[0] < minAttempts || attempts[1] < minAttempts {
			t.Fatalf("grants %v in attempts %v when the context ended (%v): both clients should have won at times", grants, attempts, ctx.Err())
		}
		t.Logf("grants: quorum %d, redsync %d", grants[0], grants[1])
	})
}
