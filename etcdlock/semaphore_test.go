package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/etcdlock"
	"github.com/quorumlock/quorumlock/lease"
)

// The semaphore on one 3-member cluster; each subtest has a name of its
// own.
func TestSemaphore(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Etcd: 3})
	admin := newClient(t, bed)
	t.Run("NeverOverAdmits", func(t *testing.T) { testSemNeverOverAdmits(t, bed, admin) })
	t.Run("PermitsMismatch", func(t *testing.T) { testSemPermitsMismatch(t, bed) })
	t.Run("TryAcquireWhenFull", func(t *testing.T) { testSemTryWhenFull(t, bed, admin) })
	t.Run("WaitersFIFO", func(t *testing.T) { testSemWaitersFIFO(t, bed) })
	t.Run("PermitLease", func(t *testing.T) { testSemPermitLease(t, bed, admin) })
	t.Run("Fencer", func(t *testing.T) { testSemFencer(t, bed) })
	t.Run("Do", func(t *testing.T) { testSemDo(t, bed, admin) })
	t.Run("ManyPermits", func(t *testing.T) { testSemMany(t, bed) })
}

// newSem returns l's semaphore name with permits permits.
func newSem(t *testing.T, l *etcdlock.Locker, name string, permits int) lease.Semaphore {
	t.Helper()
	sm, err := l.Semaphore(name, permits)
	if err != nil {
		t.Fatal(err)
	}
	return sm
}

// 12 callers on 3 Lockers, 5 rounds each, through Acquire and Do, on 3
// permits: never more than 3 hold at once (by the callers' count and by
// etcd's slot keys), and each slot's fences grow from holder to holder.
func testSemNeverOverAdmits(t *testing.T, bed *testbed.Bed, admin *clientv3.Client) {
	const permits, callers, rounds = 3, 12, 5
	var inUse, peak atomic.Int64
	var mu sync.Mutex
	fences := map[string][]int64{} // per slot, in grant order
	hold := func(ctx context.Context, le lease.Lease) error {
		n := inUse.Add(1)
		defer inUse.Add(-1)
		if n > permits {
			return fmt.Errorf("%d holders of %d permits", n, permits)
		}
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		mu.Lock()
		fences[le.Key()] = append(fences[le.Key()], le.Fence())
		mu.Unlock()
		resp, err := admin.Get(ctx, "quorumlock/crowd/slot/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil && resp.Count > permits {
			err = fmt.Errorf("%d slot keys for %d permits", resp.Count, permits)
		}
		return err
	}
	var wg sync.WaitGroup
	errs := make(chan error, callers*rounds)
	lockers := make([]*etcdlock.Locker, 3)
	for i := range lockers {
		lockers[i] = newLocker(t, bed, etcdlock.WithTTL(sessionTTL), etcdlock.WithMaxWait(time.Minute))
	}
	for i := range callers {
		sm := newSem(t, lockers[i%3], "crowd", permits)
		wg.Go(func() {
			for r := range rounds {
				if r%2 == 1 {
					errs <- sm.Do(ctxT(t), hold)
					continue
				}
				le, err := sm.Acquire(ctxT(t))
				if err == nil {
					err = errors.Join(hold(ctxT(t), le), le.Unlock(ctxT(t)))
				}
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	checkSlotFences(t, fences, permits)
	t.Logf("peak holders %d of %d", peak.Load(), permits)
}

// checkSlotFences checks that only slots 0 to permits-1 were handed out,
// each with fences that grow from holder to holder.
func checkSlotFences(t *testing.T, fences map[string][]int64, permits int) {
	t.Helper()
	for key, fs := range fences {
		if !strings.HasPrefix(key, "crowd/slot/") || len(key) != len("crowd/slot/0") || key[len(key)-1]-'0' >= byte(permits) {
			t.Errorf("permit key %q", key)
		}
		for i := 1; i < len(fs); i++ {
			if fs[i] <= fs[i-1] {
				t.Errorf("slot %s: fence %d after %d", key, fs[i], fs[i-1])
			}
		}
	}
}

// A handle with another count fails while a permit is held; once none is,
// the count is replaced. Counts out of 1 to 1024 are refused.
func testSemPermitsMismatch(t *testing.T, bed *testbed.Bed) {
	l := newLocker(t, bed, etcdlock.WithTTL(sessionTTL), etcdlock.WithMaxWait(time.Second))
	for _, n := range []int{0, -1, 1025} {
		if _, err := l.Semaphore("mm", n); err == nil {
			t.Errorf("%d permits accepted", n)
		}
	}
	if _, err := l.Semaphore("", 1); err == nil {
		t.Error("an empty name was accepted")
	}
	three, two := newSem(t, l, "mm", 3), newSem(t, l, "mm", 2)
	le, err := three.TryAcquire(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := two.TryAcquire(ctxT(t)); !errors.Is(err, lease.ErrPermitsMismatch) {
		t.Fatalf("TryAcquire with 2 permits while 3 are in use: %v, want ErrPermitsMismatch", err)
	}
	if _, err := two.Acquire(ctxT(t)); !errors.Is(err, lease.ErrPermitsMismatch) {
		t.Fatalf("Acquire with 2 permits while 3 are in use: %v, want ErrPermitsMismatch", err)
	}
	if err := le.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	le2, err := two.TryAcquire(ctxT(t))
	if err != nil {
		t.Fatalf("2 permits once none is held: %v", err)
	}
	defer le2.Unlock(ctxT(t))
	if _, err := three.TryAcquire(ctxT(t)); !errors.Is(err, lease.ErrPermitsMismatch) {
		t.Fatalf("3 permits after the count became 2: %v, want ErrPermitsMismatch", err)
	}
}

// Two permits, two holders on two Lockers: a third TryAcquire fails with
// ErrNotAcquired. Each permit's Key is its slot, its Token the etcd key,
// its Fence the key's create revision.
func testSemTryWhenFull(t *testing.T, bed *testbed.Bed, admin *clientv3.Client) {
	a := newLocker(t, bed, etcdlock.WithTTL(sessionTTL))
	b := newLocker(t, bed, etcdlock.WithTTL(sessionTTL))
	p1, err := newSem(t, a, "full", 2).TryAcquire(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	p2, err := newSem(t, b, "full", 2).TryAcquire(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newSem(t, b, "full", 2).TryAcquire(ctxT(t)); !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("TryAcquire with both permits held: %v, want ErrNotAcquired", err)
	}
	short := newLocker(t, bed, etcdlock.WithTTL(sessionTTL), etcdlock.WithMaxWait(time.Second))
	if _, err := newSem(t, short, "full", 2).Acquire(ctxT(t)); !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("Acquire past the maximum wait: %v, want ErrNotAcquired", err)
	}
	if p1.Key() == p2.Key() {
		t.Fatalf("both permits are %s", p1.Key())
	}
	for _, p := range []lease.Lease{p1, p2} {
		if p.Token() != "quorumlock/"+p.Key() || !strings.HasPrefix(p.Key(), "full/slot/") {
			t.Errorf("permit Key %q Token %q", p.Key(), p.Token())
		}
		resp, err := admin.Get(ctxT(t), p.Token())
		if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].CreateRevision != p.Fence() {
			t.Errorf("permit %s: fence %d, etcd key %v (%v)", p.Key(), p.Fence(), resp, err)
		}
		if err := p.Unlock(ctxT(t)); err != nil {
			t.Error(err)
		}
	}
}

// One permit held on Locker a; three Acquire calls on Locker b queue in
// order, and are granted in that order as each releases. A TryAcquire of
// b does not pass them; a waiter that gives up leaves the line.
func testSemWaitersFIFO(t *testing.T, bed *testbed.Bed) {
	a := newLocker(t, bed, etcdlock.WithTTL(sessionTTL))
	b := newLocker(t, bed, etcdlock.WithTTL(sessionTTL), etcdlock.WithMaxWait(time.Minute))
	held, err := newSem(t, a, "fifo", 1).TryAcquire(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newSem(t, b, "fifo", 1).Acquire(shortCtx(t)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire with a short context: %v, want its deadline", err)
	}
	if n := etcdlock.Waiting(b, "fifo"); n != 0 {
		t.Fatalf("%d waiters in line after the only one gave up", n)
	}
	var waiters []<-chan got
	for i := range 3 {
		sm := newSem(t, b, "fifo", 1)
		waiters = append(waiters, later(t, sm.Acquire))
		waitFor(t, fmt.Sprintf("waiter %d in line", i), func() bool { return etcdlock.Waiting(b, "fifo") == i+1 })
	}
	if _, err := newSem(t, b, "fifo", 1).TryAcquire(ctxT(t)); !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("TryAcquire with waiters in line: %v, want ErrNotAcquired", err)
	}
	if err := held.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	for i, w := range waiters {
		le := await(t, w, 10*time.Second)
		for _, younger := range waiters[i+1:] {
			pending(t, younger, "a younger waiter")
		}
		if err := le.Unlock(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
}

// A permit is a lease: Extend moves Until, Unlock ends it, and closing its
// Locker loses it and frees the slot for another.
func testSemPermitLease(t *testing.T, bed *testbed.Bed, admin *clientv3.Client) {
	a := newLocker(t, bed, etcdlock.WithTTL(sessionTTL))
	b := newLocker(t, bed, etcdlock.WithTTL(sessionTTL))
	p, err := newSem(t, a, "life", 1).TryAcquire(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	until := p.Until()
	if err := p.Extend(ctxT(t), sessionTTL); err != nil || p.Until().Before(until) {
		t.Fatalf("Extend: %v, Until %v then %v", err, until, p.Until())
	}
	if err := p.Extend(ctxT(t), time.Minute); err == nil {
		t.Fatal("Extend with another TTL was accepted")
	}
	if err := p.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	mustLose(t, p, lease.ErrReleased, time.Second)
	if n := countKeys(t, admin, "quorumlock/life/slot/"); n != 0 {
		t.Fatalf("%d slot keys after Unlock", n)
	}
	c := newLocker(t, bed, etcdlock.WithTTL(sessionTTL))
	p, err = newSem(t, c, "life", 1).TryAcquire(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newSem(t, b, "life", 1).TryAcquire(ctxT(t)); !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("TryAcquire while held: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	mustLose(t, p, lease.ErrLeaseLost, time.Second)
	q, err := newSem(t, b, "life", 1).TryAcquire(ctxT(t))
	if err != nil {
		t.Fatalf("the permit of a closed Locker was not freed: %v", err)
	}
	if q.Fence() <= p.Fence() {
		t.Errorf("fence %d after %d", q.Fence(), p.Fence())
	}
	_ = q.Unlock(ctxT(t))
}

// With a Fencer, a permit's fence is the Fencer's token on its slot.
func testSemFencer(t *testing.T, bed *testbed.Bed) {
	f := &memFencer{}
	l := newLocker(t, bed, etcdlock.WithTTL(sessionTTL), etcdlock.WithFencer(f))
	p, err := newSem(t, l, "fenced", 4).TryAcquire(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Unlock(ctxT(t))
	if p.Fence() != f.last(p.Key()) || p.Fence() != 1 || p.FenceOf(p.Key()) != 1 {
		t.Fatalf("permit %s: fence %d, Fencer's %d", p.Key(), p.Fence(), f.last(p.Key()))
	}
}

// Do runs fn with a permit held and releases it after.
func testSemDo(t *testing.T, bed *testbed.Bed, admin *clientv3.Client) {
	l := newLocker(t, bed, etcdlock.WithTTL(sessionTTL))
	sm := newSem(t, l, "do", 2)
	err := sm.Do(ctxT(t), func(ctx context.Context, le lease.Lease) error {
		mustHeld(t, le)
		if n := countKeys(t, admin, "quorumlock/do/slot/"); n != 1 {
			return fmt.Errorf("%d slot keys inside Do", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, admin, "quorumlock/do/slot/"); n != 0 {
		t.Fatalf("%d slot keys after Do", n)
	}
	if err := sm.Do(ctxT(t), nil); err == nil {
		t.Fatal("Do with a nil fn was accepted")
	}
}

// 40 permits, more than one transaction tries: 40 TryAcquire calls get 40
// slots, the 41st none; a released slot goes to the next Acquire.
func testSemMany(t *testing.T, bed *testbed.Bed) {
	const permits = 40
	l := newLocker(t, bed, etcdlock.WithTTL(sessionTTL), etcdlock.WithMaxWait(time.Minute))
	sm := newSem(t, l, "many", permits)
	keys := map[string]lease.Lease{}
	for range permits {
		p, err := sm.TryAcquire(ctxT(t))
		if err != nil {
			t.Fatalf("permit %d of %d: %v", len(keys)+1, permits, err)
		}
		if keys[p.Key()] != nil {
			t.Fatalf("slot %s handed out twice", p.Key())
		}
		keys[p.Key()] = p
	}
	if _, err := sm.TryAcquire(ctxT(t)); !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("permit %d of %d: %v, want ErrNotAcquired", permits+1, permits, err)
	}
	next := later(t, sm.Acquire)
	freed := keys["many/slot/17"]
	if err := freed.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if p := await(t, next, 10*time.Second); p.Key() != freed.Key() {
		t.Fatalf("the waiter got %s, the free slot is %s", p.Key(), freed.Key())
	}
	for _, p := range keys {
		_ = p.Unlock(ctxT(t))
	}
}
