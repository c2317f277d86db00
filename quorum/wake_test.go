package quorum_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/quorum"
)

// patient is a Lock configuration whose backoff alone would keep a waiter
// asleep for a long time: what wakes it sooner is the release message.
func patient() []quorum.Option {
	return []quorum.Option{
		quorum.WithTTL(5 * time.Minute),
		quorum.WithRetry(quorum.Retry{BaseDelay: time.Hour, MaxDelay: time.Hour}),
		quorum.WithMaxWait(2 * time.Hour),
	}
}

// TestWaiterWakesOnRelease: a Lock call that found the key held is woken
// by the release message of the holder's Unlock, not by its backoff (an
// hour here): it acquires on its second attempt, with one wake-up
// recorded. Without the message it would sleep on.
func TestWaiterWakesOnRelease(t *testing.T) {
	r := newRig(t)
	holder := r.locker(t, quorum.WithTTL(5*time.Minute))
	rec := &recorder{}
	l := r.locker(t, append(patient(), quorum.WithObserver(rec))...)
	k := key(t)
	held, err := holder.Lock(ctxT(t, 10*time.Second), k)
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		le  lease.Lease
		err error
	}
	got := make(chan res, 1)
	ctx := ctxT(t, slow(time.Minute))
	go func() {
		le, err := l.Lock(ctx, k)
		got <- res{le, err}
	}()
	eventually(t, 10*time.Second, "the waiter subscribed on a majority", func() bool { return l.SubscribedBy(k) >= 3 })
	if err := held.Unlock(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	var g res
	select {
	case g = <-got:
	case <-ctx.Done():
		t.Fatal("the waiter was not woken by the release")
	}
	if g.err != nil {
		t.Fatal(g.err)
	}
	defer func() { _ = g.le.Unlock(context.Background()) }()
	ev := rec.snapshot().acquires
	if len(ev) != 1 || ev[0].Attempts != 2 || ev[0].Wakeups != 1 {
		t.Fatalf("acquire events %+v, want 2 attempts and 1 wake-up", ev)
	}
	eventually(t, 10*time.Second, "the subscription is dropped", func() bool { return l.SubscribedBy(k) == 0 && l.Waiting(k) == 0 })
}

// TestWaitersAreServedOldestFirst: waiters of one Locker get the key in
// the order they began to wait.
func TestWaitersAreServedOldestFirst(t *testing.T) {
	r := newRig(t)
	l := r.locker(t, patient()...)
	k := key(t)
	first, err := l.Lock(ctxT(t, 10*time.Second), k)
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 3
	ctx := ctxT(t, slow(time.Minute))
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	next := make([]chan struct{}, waiters)
	for i := range waiters {
		next[i] = make(chan struct{})
		wg.Go(func() {
			le, err := l.Lock(ctx, k)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			<-next[i] // hold until told
			if err := le.Unlock(context.Background()); err != nil {
				t.Errorf("waiter %d: unlock: %v", i, err)
			}
		})
		// Start the next waiter only once this one waits.
		eventually(t, 10*time.Second, "the waiter queues", func() bool { return l.Waiting(k) == i+1 })
	}
	eventually(t, 10*time.Second, "the key's releases are announced", func() bool { return l.SubscribedBy(k) >= 3 })
	if err := first.Unlock(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	for i := range waiters {
		eventually(t, 30*time.Second, "the next waiter acquires", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(order) == i+1
		})
		close(next[i])
	}
	wg.Wait()
	for i, w := range order {
		if w != i {
			t.Fatalf("acquired in the order %v, want oldest first", order)
		}
	}
}

// TestReleaseMessageIsOnlyAHint: an announcement is a reason to try, never
// a grant. A forged one while the key is held wakes the waiter, whose
// attempt is refused, and it keeps waiting; only the real release lets it
// in.
func TestReleaseMessageIsOnlyAHint(t *testing.T) {
	r := newRig(t)
	holder := r.locker(t, quorum.WithTTL(5*time.Minute))
	rec := &recorder{}
	// Every attempt is refused by all five nodes: ten refusals mean the
	// waiter has tried a second time.
	refused := newHeldAnswers(10)
	l, err := quorum.New(r.hookedClients(t, refused), append(patient(), quorum.WithObserver(rec), quorum.WithNodeTimeout(slow(time.Second)))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	k := key(t)
	held, err := holder.Lock(ctxT(t, 10*time.Second), k)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	var le lease.Lease
	ctx := ctxT(t, slow(time.Minute))
	go func() {
		var err error
		le, err = l.Lock(ctx, k)
		got <- err
	}()
	eventually(t, 10*time.Second, "the waiter subscribed on a majority", func() bool { return l.SubscribedBy(k) >= 3 })
	// Forge an announcement on every node while the holder still holds.
	for i := range 5 {
		if err := r.admin[i].Publish(ctxT(t, 5*time.Second), quorum.ReleaseChannelPrefix+k, "1").Err(); err != nil {
			t.Fatal(err)
		}
	}
	// The waiter tries again (a second attempt) and is refused.
	waitClosed(t, refused.reached, 10*time.Second, "the woken waiter tries again and is refused")
	// Lock returns at a majority: a node may still be setting the token
	// (or may have timed out on a loaded machine); a majority is the hold.
	if got := r.count(t, k, held.Token()); got < 3 {
		t.Fatalf("the holder's token is on %d nodes", got)
	}
	select {
	case err := <-got:
		t.Fatalf("the waiter returned (%v) while the key was held", err)
	default:
	}
	if err := held.Unlock(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("the waiter was not woken by the real release")
	}
	defer func() { _ = le.Unlock(context.Background()) }()
	if ev := rec.snapshot().acquires; len(ev) != 1 || ev[0].Attempts < 3 || ev[0].Wakeups < 2 {
		t.Fatalf("acquire events %+v, want at least 3 attempts and 2 wake-ups", ev)
	}
}

// TestNewLockCallsQueueBehindWaiters: a Lock call that finds waiters of
// its Locker queued for the key takes its place behind them, even when it
// comes the moment the key is released (the holder locking again at once,
// as a busy loop does): it does not barge in ahead of them.
func TestNewLockCallsQueueBehindWaiters(t *testing.T) {
	r := newRig(t)
	l := r.locker(t, patient()...)
	k := key(t)
	ctx := ctxT(t, slow(time.Minute))
	first, err := l.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		order []string
		wg    sync.WaitGroup
	)
	take := func(who string) {
		le, err := l.Lock(ctx, k)
		if err != nil {
			t.Errorf("%s: %v", who, err)
			return
		}
		mu.Lock()
		order = append(order, who)
		mu.Unlock()
		if err := le.Unlock(context.Background()); err != nil {
			t.Errorf("%s: unlock: %v", who, err)
		}
	}
	for i, who := range []string{"w1", "w2"} {
		wg.Go(func() { take(who) })
		eventually(t, 10*time.Second, "the waiter queues", func() bool { return l.Waiting(k) == i+1 })
	}
	eventually(t, 10*time.Second, "the key's releases are announced", func() bool { return l.SubscribedBy(k) >= 3 })
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	take("again") // the holder, straight back
	wg.Wait()
	if got := strings.Join(order, ","); got != "w1,w2,again" {
		t.Fatalf("acquired in the order %s, want w1,w2,again", got)
	}
}

// TestWaiterDoesNotPollALeaseOfItsOwnLocker: while a lease of the same
// Locker holds the key, the oldest waiter does not try on its backoff
// (here 1ms): it could only be refused. Once the lease is gone (here it
// expires, unreleased) it tries again on its backoff and gets the key.
func TestWaiterDoesNotPollALeaseOfItsOwnLocker(t *testing.T) {
	r := newRig(t)
	calls := newScriptCalls()
	ttl := slow(time.Second)
	l, err := quorum.New(r.hookedClients(t, calls), quorum.WithTTL(ttl),
		quorum.WithRetry(quorum.Retry{BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}), quorum.WithMaxWait(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	k := key(t)
	if _, err := l.Lock(ctxT(t, 10*time.Second), k); err != nil { // never unlocked: it expires
		t.Fatal(err)
	}
	start := time.Now()
	g := <-lockAsync(ctxT(t, slow(time.Minute)), l, k)
	if g.err != nil {
		t.Fatal(g.err)
	}
	defer func() { _ = g.le.Unlock(context.Background()) }()
	// Polling every millisecond or so for the TTL would be thousands of
	// attempts; the waiter made one before it queued, then the few until
	// the expired key was gone from a majority (a loaded machine's timers
	// make a few dozen: 35 seen under CI's load).
	if n, waited := calls.count("acquire")/5, time.Since(start); n > 100 {
		t.Fatalf("%d attempts in %v (the holder's included), want a few", n, waited)
	}
}
