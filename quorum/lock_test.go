package quorum_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/quorum"
)

// Behaviour 1-3: the vote, the token and the validity, on five real masters.
func TestAcquire(t *testing.T) {
	r := newRig(t)

	t.Run("GrantsOnEveryNode", func(t *testing.T) {
		// The node timeout (and the context, which bounds the late
		// requests too) lets the nodes outside the majority answer on a
		// loaded machine; the TTL outlasts the test.
		ttl := slow(time.Minute)
		allowance := ttl/100 + 2*time.Millisecond
		l := r.locker(t, quorum.WithTTL(ttl), quorum.WithNodeTimeout(slow(10*time.Second)))
		k := key(t)
		before := time.Now()
		le, err := l.Lock(ctxT(t, slow(time.Minute)), k)
		after := time.Now()
		if err != nil {
			t.Fatal(err)
		}
		if le.Key() != k {
			t.Fatalf("Key() = %q", le.Key())
		}
		if le.Fence() != 0 {
			t.Fatalf("Fence() = %d without a Fencer", le.Fence())
		}
		eventually(t, 15*time.Second, "every node holds the token", func() bool { return r.count(t, k, le.Token()) == 5 })
		// Validity: TTL - elapsed - (TTL*0.01 + 2ms), measured from before the first request.
		maxUntil := after.Add(ttl - allowance)
		minUntil := before.Add(ttl - allowance - after.Sub(before))
		if u := le.Until(); u.After(maxUntil) || u.Before(minUntil) {
			t.Fatalf("Until %v outside [%v, %v]", u.Sub(before), minUntil.Sub(before), maxUntil.Sub(before))
		}
		if err := le.Unlock(ctxT(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		// Unlock returns at the majority; the rest follow in the background.
		eventually(t, 10*time.Second, "every node released", func() bool { return r.count(t, k, "") == 5 })
	})

	t.Run("TokensAreRandomAndAtLeast128Bits", func(t *testing.T) {
		l := r.locker(t)
		k := key(t)
		seen := map[string]bool{}
		for range 30 {
			le, err := l.TryLock(ctxT(t, 5*time.Second), k)
			if err != nil {
				t.Fatal(err)
			}
			tok := le.Token()
			// base32 text: 5 bits a character, so 26 characters carry 130 bits.
			if len(tok) < 26 || strings.Trim(tok, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") != "" {
				t.Fatalf("token %q: want at least 26 base32 characters", tok)
			}
			if seen[tok] {
				t.Fatalf("token %q drawn twice", tok)
			}
			seen[tok] = true
			if got := r.count(t, k, tok); got < 3 {
				t.Fatalf("token is the value on only %d nodes", got)
			}
			if err := le.Unlock(ctxT(t, 5*time.Second)); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("ReturnsAtMajorityWithoutWaitingForPausedNodes", func(t *testing.T) {
		// Had Lock waited for the paused nodes, it could only return once
		// they are resumed, which happens after. The node timeout (and the
		// context, which bounds the late requests too) outlasts resuming
		// the nodes on a loaded machine, so the late SETs are not cut off;
		// the TTL outlasts the whole test.
		l := r.locker(t, quorum.WithTTL(10*time.Minute), quorum.WithNodeTimeout(2*time.Minute))
		k := key(t)
		resume := r.pause(t, 3, 4)
		le, err := l.Lock(ctxT(t, 5*time.Minute), k)
		if err != nil {
			t.Fatal(err)
		}
		resume()
		// The late SETs land after the vote; they hold our token and
		// stay part of the lease.
		eventually(t, 5*time.Second, "the resumed nodes answer", func() bool { return r.count(t, k, le.Token()) == 5 })
		if err := le.Unlock(ctxT(t, time.Minute)); err != nil {
			t.Fatal(err)
		}
		// Unlock returns at the majority; the rest follow in the background.
		eventually(t, 10*time.Second, "every node released", func() bool { return r.count(t, k, "") == 5 })
	})

	t.Run("GivesUpEarlyAndReleasesLateWinners", func(t *testing.T) {
		rec := &recorder{}
		// The request to node 4 must still be waiting when node 4 is
		// resumed (node timeout and context outlast that on a loaded
		// machine), and the other owner's keys outlast the test.
		l := r.locker(t, quorum.WithTTL(10*time.Minute), quorum.WithNodeTimeout(2*time.Minute), quorum.WithObserver(rec))
		k := key(t)
		r.setOn(t, k, "other-owner", 10*time.Minute, 0, 1, 2)
		resume := r.pause(t, 4)
		_, err := l.TryLock(ctxT(t, 5*time.Minute), k)
		if !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("got %v, want ErrNotAcquired while node 4 is paused", err)
		}
		// Node 3 granted the key; it is released without waiting for node 4.
		eventually(t, 2*time.Second, "node 3 is released while node 4 is paused", func() bool { return r.value(t, k, 3) == "" && rec.released() == 1 })
		resume()
		// Node 4 grants late; the drain releases it.
		eventually(t, 5*time.Second, "the late winner is released", func() bool { return rec.released() == 2 })
		if got := r.values(t, k); !slices.Equal(got, []string{"other-owner", "other-owner", "other-owner", "", ""}) {
			t.Fatalf("values %q", got)
		}
		noQuorumGoroutines(t, time.Second)
	})

	t.Run("MinorityPartitionStillAcquires", func(t *testing.T) {
		l := r.locker(t, quorum.WithTTL(5*time.Minute))
		k := key(t)
		heal := r.partition(t, 3, 4)
		defer heal()
		le, err := l.Lock(ctxT(t, 10*time.Second), k)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.count(t, k, le.Token()); got != 3 {
			t.Fatalf("token on %d nodes, want 3", got)
		}
		// A majority confirms the release: Unlock returns without waiting
		// for the cut-off nodes, whose requests end in the background.
		if err := le.Unlock(ctxT(t, 2*time.Minute)); err != nil {
			t.Fatalf("unlock with a majority reachable: %v", err)
		}
		if got := r.count(t, k, ""); got != 5 {
			t.Fatalf("key left on %d nodes", 5-got)
		}
	})

	t.Run("UnreachableMajorityIsUnconfirmed", func(t *testing.T) {
		l := r.locker(t, quorum.WithTTL(5*time.Minute))
		k := key(t)
		le, err := l.Lock(ctxT(t, 10*time.Second), k)
		if err != nil {
			t.Fatal(err)
		}
		heal := r.partition(t, 2, 3, 4)
		err = le.Unlock(ctxT(t, 2*time.Minute))
		var qe *quorum.QuorumError
		if !errors.Is(err, lease.ErrUnlockUnconfirmed) || !errors.As(err, &qe) {
			heal()
			t.Fatalf("got %v, want a *QuorumError matching ErrUnlockUnconfirmed", err)
		}
		if got := nodeIndexes(qe.Nodes); !slices.Equal(got, []int{2, 3, 4}) {
			heal()
			t.Fatalf("unconfirmed nodes %v, want [2 3 4]: %v", got, err)
		}
		for _, ne := range qe.Nodes {
			if ne.Addr != r.nodes[ne.Node].Addr() || ne.Err == nil {
				heal()
				t.Fatalf("node error %+v does not name the node and its error", ne)
			}
		}
		heal()
		// Retrying is safe and only needs the unconfirmed nodes.
		if err := le.Unlock(ctxT(t, time.Minute)); err != nil {
			t.Fatal(err)
		}
		// It returned at a majority; the last node follows in the
		// background, and Close waits for it.
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if got := r.count(t, k, ""); got != 5 {
			t.Fatalf("key left on %d nodes", 5-got)
		}
	})
}

// Behaviour 9: lease.ErrNotAcquired and lease.ErrQuorumUnavailable, with per-node errors.
func TestErrors(t *testing.T) {
	r := newRig(t)

	t.Run("HeldByMajorityIsNotAcquired", func(t *testing.T) {
		l := r.locker(t)
		k := key(t)
		r.setOn(t, k, "other-owner", 10*time.Minute, 0, 2, 4)
		_, err := l.TryLock(ctxT(t, 10*time.Second), k)
		var qe *quorum.QuorumError
		if !errors.Is(err, lease.ErrNotAcquired) || !errors.As(err, &qe) {
			t.Fatalf("got %v, want a *QuorumError matching ErrNotAcquired", err)
		}
		if errors.Is(err, lease.ErrQuorumUnavailable) || qe.Held < 3 || len(qe.Nodes) != 0 {
			t.Fatalf("contention misreported: %+v", qe)
		}
		want := []string{"other-owner", "", "other-owner", "", "other-owner"}
		eventually(t, 2*time.Second, "the failed attempt leaves nothing behind", func() bool { return slices.Equal(r.values(t, k), want) })
	})

	t.Run("MajorityPartitionIsUnavailable", func(t *testing.T) {
		l := r.locker(t)
		k := key(t)
		r.partition(t, 2, 3, 4)
		_, err := l.TryLock(ctxT(t, 10*time.Second), k)
		var qe *quorum.QuorumError
		if !errors.Is(err, lease.ErrQuorumUnavailable) || !errors.As(err, &qe) {
			t.Fatalf("got %v, want a *QuorumError matching ErrQuorumUnavailable", err)
		}
		if errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("unavailability reported as contention: %v", err)
		}
		// A node timeout is not the caller's deadline.
		if !errors.Is(err, quorum.ErrNodeTimeout) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("node timeouts must match ErrNodeTimeout and not context.DeadlineExceeded: %v", err)
		}
		if got := nodeIndexes(qe.Nodes); !slices.Equal(got, []int{2, 3, 4}) {
			t.Fatalf("failed nodes %v, want [2 3 4]: %v", got, err)
		}
		for _, ne := range qe.Nodes {
			if ne.Addr != r.nodes[ne.Node].Addr() || ne.Err == nil || !strings.Contains(err.Error(), ne.Addr) {
				t.Fatalf("node error %+v is not named in %q", ne, err)
			}
		}
		// The two nodes that granted are released in the background.
		eventually(t, 10*time.Second, "the granted nodes are released", func() bool {
			return slices.Equal(r.values(t, k)[:2], []string{"", ""})
		})
		// Lock retries, then reports the same cause. The attempt count
		// bounds it: a time budget could run out during the first attempt
		// on a loaded machine, and then there is no retry to see.
		l2 := r.locker(t, quorum.WithNodeTimeout(slow(300*time.Millisecond)), quorum.WithMaxWait(0),
			quorum.WithRetry(quorum.Retry{Attempts: 3, BaseDelay: 5 * time.Millisecond, MaxDelay: 20 * time.Millisecond}))
		_, err = l2.Lock(ctxT(t, 2*time.Minute), k)
		if !errors.Is(err, lease.ErrQuorumUnavailable) || !errors.As(err, &qe) || !strings.Contains(err.Error(), "gave up after") {
			t.Fatalf("Lock: got %v", err)
		}
	})

	t.Run("PausedNodesDoNotBlockPastNodeTimeout", func(t *testing.T) {
		l := r.locker(t)
		k := key(t)
		r.pause(t, 2, 3, 4)
		// The context allows a minute: only the node timeout can end this.
		_, err := l.TryLock(ctxT(t, time.Minute), k)
		var qe *quorum.QuorumError
		if !errors.Is(err, lease.ErrQuorumUnavailable) || !errors.As(err, &qe) {
			t.Fatalf("got %v, want ErrQuorumUnavailable", err)
		}
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, quorum.ErrNodeTimeout) {
			t.Fatalf("want node timeouts, not a context error: %v", err)
		}
		if got := nodeIndexes(qe.Nodes); !slices.Equal(got, []int{2, 3, 4}) {
			t.Fatalf("failed nodes %v, want [2 3 4]", got)
		}
	})
}

// Many failed attempts in a row on a held key: every one must be reported as
// contention. (Answers that all arrived before the attempt's context was
// released must never be mistaken for timeouts.)
func TestContendedTryLockIsAlwaysNotAcquired(t *testing.T) {
	r := newRig(t)
	l := r.locker(t)
	k := key(t)
	// The holder's key is on every node and outlasts the whole loop, even
	// under -race on a loaded machine, so every attempt meets a live key.
	held := r.hold(t, k)
	ctx := ctxT(t, 2*time.Minute)
	for i := range 1500 {
		if _, err := l.TryLock(ctx, k); !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("attempt %d: got %v, want ErrNotAcquired", i, err)
		}
	}
	noQuorumGoroutines(t, 2*time.Second)
	if got := r.count(t, k, held.Token()); got != 5 {
		t.Fatalf("values %q", r.values(t, k))
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func nodeIndexes(nes []quorum.NodeError) []int {
	var out []int
	for _, ne := range nes {
		out = append(out, ne.Node)
	}
	slices.Sort(out)
	return out
}

// Behaviour 4: release, backoff, budget and context.
func TestFailureAndRetry(t *testing.T) {
	r := newRig(t)

	t.Run("LockWaitsForTheHolder", func(t *testing.T) {
		rec := &recorder{}
		// The holder releases once a majority of nodes refused the
		// waiter (an attempt failed), whatever the scheduling: no sleep
		// decides who runs first.
		refused := newHeldAnswers(3)
		holder := r.locker(t, quorum.WithTTL(5*time.Minute))
		l, err := quorum.New(r.hookedClients(t, refused), quorum.WithNodeTimeout(slow(time.Second)),
			quorum.WithObserver(rec), quorum.WithMaxWait(slow(20*time.Second)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		k := key(t)
		held, err := holder.Lock(ctxT(t, 10*time.Second), k)
		if err != nil {
			t.Fatal(err)
		}
		released := make(chan error, 1)
		go func() {
			select {
			case <-refused.reached:
				released <- held.Unlock(context.Background())
			case <-time.After(slow(time.Minute)):
				released <- errors.New("no attempt of the waiter was refused")
			}
		}()
		le, err := l.Lock(ctxT(t, 2*time.Minute), k)
		if err != nil {
			t.Fatal(err)
		}
		if err := <-released; err != nil {
			t.Fatal(err)
		}
		ev := rec.snapshot().acquires
		if len(ev) != 1 || ev[0].Result != lease.ResultAcquired || ev[0].Attempts < 2 || ev[0].Duration <= 0 {
			t.Fatalf("acquire events %+v, want one success after several attempts", ev)
		}
		if err := le.Unlock(ctxT(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("LockGivesUpAtMaxWaitAndLeavesNothing", func(t *testing.T) {
		rec := &recorder{}
		l := r.locker(t, quorum.WithObserver(rec), quorum.WithMaxWait(slow(time.Second)),
			quorum.WithRetry(quorum.Retry{BaseDelay: 5 * time.Millisecond, MaxDelay: 50 * time.Millisecond}))
		k := key(t)
		// On every node, and outlasting the waiter's budget and the
		// checks after it.
		held := r.hold(t, k)
		_, err := l.Lock(ctxT(t, 30*time.Second), k)
		if !errors.Is(err, lease.ErrNotAcquired) || !strings.Contains(err.Error(), "gave up after") {
			t.Fatalf("got %v", err)
		}
		ev := rec.snapshot().acquires
		if len(ev) != 1 || ev[0].Result != lease.ResultNotAcquired || ev[0].Attempts < 3 || ev[0].Err == nil {
			t.Fatalf("acquire events %+v", ev)
		}
		// Every attempt released what it won: only the holder's token is left.
		noQuorumGoroutines(t, time.Second)
		if got := r.count(t, k, held.Token()); got != 5 {
			t.Fatalf("values %q: attempts left keys behind", r.values(t, k))
		}
		if err := held.Unlock(ctxT(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("LockStopsAfterAttempts", func(t *testing.T) {
		rec := &recorder{}
		l := r.locker(t, quorum.WithObserver(rec), quorum.WithMaxWait(0),
			quorum.WithRetry(quorum.Retry{Attempts: 3, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}))
		k := key(t)
		r.setOn(t, k, "other-owner", 10*time.Minute, 0, 1, 2, 3, 4)
		_, err := l.Lock(ctxT(t, 10*time.Second), k)
		if !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("got %v", err)
		}
		if ev := rec.snapshot().acquires; len(ev) != 1 || ev[0].Attempts != 3 {
			t.Fatalf("acquire events %+v, want 3 attempts", ev)
		}
	})

	t.Run("CancelReturnsTheContextError", func(t *testing.T) {
		rec := &recorder{}
		l := r.locker(t, quorum.WithObserver(rec))
		k := key(t)
		r.setOn(t, k, "other-owner", 10*time.Minute, 0, 1, 2, 3, 4)

		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(200*time.Millisecond, cancel)
		_, err := l.Lock(ctx, k)
		if !errors.Is(err, context.Canceled) || errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("got %v, want an error wrapping context.Canceled", err)
		}

		ctx, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel2()
		_, err = l.Lock(ctx, k)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want an error wrapping context.DeadlineExceeded", err)
		}

		cause := errors.New("shutting down")
		ctx, cancel3 := context.WithCancelCause(context.Background())
		cancel3(cause)
		_, err = l.TryLock(ctx, k)
		if !errors.Is(err, context.Canceled) || !errors.Is(err, cause) {
			t.Fatalf("got %v, want context.Canceled and its cause", err)
		}
		ev := rec.snapshot().acquires
		if len(ev) != 3 || ev[2].Attempts != 0 {
			t.Fatalf("acquire events %+v: a done context must not reach the nodes", ev)
		}
		for _, e := range ev {
			if e.Result != lease.ResultCanceled {
				t.Fatalf("result %v, want canceled", e.Result)
			}
		}
	})
}

// Behaviour 5: Unlock.
func TestUnlock(t *testing.T) {
	r := newRig(t)

	t.Run("DeletesEverywhereAndIsSafeToRepeat", func(t *testing.T) {
		rec := &recorder{}
		// Released must count all five nodes: the node timeout (and the
		// context) let the nodes outside the majority grant too on a
		// loaded machine, and the key outlasts the test.
		l := r.locker(t, quorum.WithTTL(10*time.Minute), quorum.WithNodeTimeout(2*time.Minute), quorum.WithObserver(rec))
		k := key(t)
		le, err := l.Lock(ctxT(t, 5*time.Minute), k)
		if err != nil {
			t.Fatal(err)
		}
		if err := le.Unlock(ctxT(t, 5*time.Minute)); err != nil {
			t.Fatal(err)
		}
		// Unlock returned at the majority; the event comes once the last
		// node has answered.
		eventually(t, 30*time.Second, "the release event", func() bool { return len(rec.snapshot().releases) == 1 })
		if got := r.count(t, k, ""); got != 5 {
			t.Fatalf("key left on %d nodes", 5-got)
		}
		if err := le.Unlock(ctxT(t, 5*time.Second)); err != nil {
			t.Fatalf("second Unlock: %v", err)
		}
		if !errors.Is(le.Err(), lease.ErrReleased) {
			t.Fatalf("Err() = %v, want ErrReleased", le.Err())
		}
		waitClosed(t, le.Lost(), time.Second, "Lost is closed after Unlock")
		if ev := rec.snapshot().releases; len(ev) != 1 || ev[0].Released != 5 || ev[0].NotOwner != 0 || ev[0].Failed != 0 {
			t.Fatalf("release events %+v", ev)
		}
	})

	t.Run("ExpiredHolderCannotDeleteTheNewHolder", func(t *testing.T) {
		rec := &recorder{}
		// The old holder's Unlock must hear all five nodes within its
		// node timeout, so that node timeout is not a tight one.
		old := r.locker(t, quorum.WithTTL(slow(time.Second)), quorum.WithNodeTimeout(slow(300*time.Millisecond)), quorum.WithObserver(rec))
		k := key(t)
		oldLease, err := old.Lock(ctxT(t, 30*time.Second), k)
		if err != nil {
			t.Fatal(err)
		}
		waitClosed(t, oldLease.Lost(), 5*time.Second, "the old lease expires")
		eventually(t, 5*time.Second, "the keys expire", func() bool { return r.count(t, k, "") == 5 })
		newLease := r.hold(t, k) // token-new, on every node
		err = oldLease.Unlock(ctxT(t, 30*time.Second))
		if !errors.Is(err, lease.ErrLeaseLost) {
			t.Fatalf("old Unlock: got %v, want ErrLeaseLost", err)
		}
		// Unlock returned once a majority said "not ours"; Close waits for
		// the rest, so every node has answered the old holder.
		if err := old.Close(); err != nil {
			t.Fatal(err)
		}
		if got := r.count(t, k, newLease.Token()); got != 5 {
			t.Fatalf("values %q: the old holder touched the new holder's key", r.values(t, k))
		}
		if ev := rec.snapshot().releases; len(ev) != 1 || ev[0].NotOwner != 5 || ev[0].Released != 0 {
			t.Fatalf("release events %+v, want 5 not-owner answers", ev)
		}
		if err := newLease.Unlock(ctxT(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
	})
}

// Behaviour 6: Extend.
func TestExtend(t *testing.T) {
	r := newRig(t)

	t.Run("ExtendsAndRecomputesValidity", func(t *testing.T) {
		rec := &recorder{}
		// The node timeout (and the contexts, which bound the late
		// requests too) lets every node answer the acquisition and the
		// extension on a loaded machine, so that the token, then the new
		// TTL, reaches all five; the lease outlives waiting for that. The
		// TTL stays below the extension's 30s: a node the extension missed
		// keeps a PTTL below the one checked for.
		l := r.locker(t, quorum.WithTTL(25*time.Second), quorum.WithNodeTimeout(8*time.Second), quorum.WithAmnesiaWindow(time.Minute), quorum.WithObserver(rec))
		k := key(t)
		le, err := l.Lock(ctxT(t, time.Minute), k)
		if err != nil {
			t.Fatal(err)
		}
		// Lock returns at a majority: let the other nodes' SETs land, so
		// that the extension can reach the key on every node.
		eventually(t, 10*time.Second, "the token is on every node", func() bool { return r.count(t, k, le.Token()) == 5 })
		before, old := time.Now(), le.Until()
		if err := le.Extend(ctxT(t, time.Minute), 30*time.Second); err != nil {
			t.Fatal(err)
		}
		after := time.Now()
		u := le.Until()
		if u.Before(before.Add(30*time.Second-302*time.Millisecond-after.Sub(before))) || u.After(after.Add(30*time.Second-302*time.Millisecond)) || !u.After(old) {
			t.Fatalf("Until after Extend is %v from now, want about 30s - 302ms", time.Until(u))
		}
		// Each node's new TTL was set after before, so it is at least 30s
		// minus the time since then (PTTL truncates to milliseconds). The
		// old TTL was 25s, set before before: an old PTTL is below that.
		// Extend returns at a majority; the other nodes answer within the
		// node timeout.
		eventually(t, 10*time.Second, "every node has the new TTL", func() bool {
			for _, a := range r.admin {
				d, err := a.PTTL(ctxT(t, 10*time.Second), k).Result()
				if err != nil || d < 30*time.Second-time.Since(before)-time.Millisecond {
					return false
				}
			}
			return true
		})
		if ev := rec.snapshot().extends; len(ev) != 1 || ev[0].Err != nil || ev[0].Confirmed < 3 {
			t.Fatalf("extend events %+v", ev)
		}
		if err := le.Unlock(ctxT(t, time.Minute)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("AfterExpiryIsLeaseLost", func(t *testing.T) {
		l := r.locker(t, quorum.WithTTL(slow(400*time.Millisecond)), quorum.WithNodeTimeout(slow(150*time.Millisecond)))
		k := key(t)
		le, err := l.Lock(ctxT(t, 30*time.Second), k)
		if err != nil {
			t.Fatal(err)
		}
		waitClosed(t, le.Lost(), 5*time.Second, "the lease expires")
		err = le.Extend(ctxT(t, 10*time.Second), slow(400*time.Millisecond))
		if !errors.Is(err, lease.ErrLeaseLost) {
			t.Fatalf("got %v, want ErrLeaseLost", err)
		}
	})

	t.Run("AfterTakeoverIsLeaseLost", func(t *testing.T) {
		l := r.locker(t, quorum.WithTTL(slow(400*time.Millisecond)), quorum.WithNodeTimeout(slow(150*time.Millisecond)))
		k := key(t)
		le, err := l.Lock(ctxT(t, 30*time.Second), k)
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, 5*time.Second, "the keys expire", func() bool { return r.count(t, k, "") == 5 })
		// The new holder takes the key on every node, written directly as
		// another owner would (a locker could win on only a majority when
		// a node answers late). Its TTL is far above both the old lease's
		// TTL and the time the checks below can take on a loaded machine.
		const newToken = "token-new"
		r.setOn(t, k, newToken, 10*time.Minute, 0, 1, 2, 3, 4)
		err = le.Extend(ctxT(t, 10*time.Second), slow(400*time.Millisecond))
		if !errors.Is(err, lease.ErrLeaseLost) || errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("got %v, want ErrLeaseLost", err)
		}
		for i, a := range r.admin {
			d, err := a.PTTL(ctxT(t, 10*time.Second), k).Result()
			if err != nil {
				t.Fatalf("node %d: PTTL: %v", i, err)
			}
			if d < 5*time.Minute {
				t.Fatalf("node %d: the new holder's TTL was changed to %v", i, d)
			}
		}
		if got := r.count(t, k, newToken); got != 5 {
			t.Fatalf("values %q", r.values(t, k))
		}
	})

	t.Run("MajorityUnreachableShortensNotLoses", func(t *testing.T) {
		rec := &recorder{}
		// The lease stays valid through the partition, however long it
		// takes to set up.
		l := r.locker(t, quorum.WithTTL(5*time.Minute), quorum.WithObserver(rec))
		k := key(t)
		le, err := l.Lock(ctxT(t, 10*time.Second), k)
		if err != nil {
			t.Fatal(err)
		}
		before := le.Until()
		heal := r.partition(t, 1, 2, 3)
		start := time.Now()
		err = le.Extend(ctxT(t, time.Minute), 10*time.Second)
		var qe *quorum.QuorumError
		if !errors.Is(err, lease.ErrExtendUnconfirmed) || !errors.As(err, &qe) || errors.Is(err, lease.ErrLeaseLost) {
			t.Fatalf("got %v, want a *QuorumError matching ErrExtendUnconfirmed, not ErrLeaseLost", err)
		}
		if got := nodeIndexes(qe.Nodes); !slices.Equal(got, []int{1, 2, 3}) {
			t.Fatalf("failed nodes %v", got)
		}
		// The unreached nodes may have applied the 10s TTL: Until moved
		// to no later than what that TTL gives, and never later.
		if u := le.Until(); u.After(start.Add(10*time.Second)) || u.After(before) {
			t.Fatalf("Until %v after an unclear 10s extension started %v (was %v)", u, start, before)
		}
		if le.Err() != nil || len(rec.snapshot().lost) != 0 {
			t.Fatalf("the lease was declared lost: %v", le.Err())
		}
		heal()
		// Still held: a later extension gets through.
		if err := le.Extend(ctxT(t, time.Minute), 5*time.Minute); err != nil {
			t.Fatalf("Extend after the heal: %v", err)
		}
		_ = le.Unlock(ctxT(t, 5*time.Second))
	})

	t.Run("MajorityWithoutTheTokenLosesTheLease", func(t *testing.T) {
		rec := &recorder{}
		l := r.locker(t, quorum.WithTTL(5*time.Minute), quorum.WithObserver(rec))
		k := key(t)
		le, err := l.Lock(ctxT(t, 10*time.Second), k)
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, "the token is on every node", func() bool { return r.count(t, k, le.Token()) == 5 })
		// Three nodes forgot the key (a restart, an eviction).
		for _, i := range []int{0, 2, 4} {
			if err := r.admin[i].Del(ctxT(t, 10*time.Second), k).Err(); err != nil {
				t.Fatal(err)
			}
		}
		err = le.Extend(ctxT(t, time.Minute), 10*time.Second)
		var qe *quorum.QuorumError
		if !errors.Is(err, lease.ErrLeaseLost) || !errors.As(err, &qe) || qe.Held != 3 {
			t.Fatalf("got %v, want a *QuorumError matching ErrLeaseLost with 3 nodes without the token", err)
		}
		waitClosed(t, le.Lost(), time.Second, "Lost is closed after a failed extension")
		if !errors.Is(le.Err(), lease.ErrLeaseLost) {
			t.Fatalf("Err() = %v", le.Err())
		}
		if ev := rec.snapshot().lost; len(ev) != 1 || ev[0].Reason != lease.LostExtendFailed {
			t.Fatalf("lost events %+v", ev)
		}
		if err := le.Extend(ctxT(t, 5*time.Second), 10*time.Second); !errors.Is(err, lease.ErrLeaseLost) {
			t.Fatalf("Extend on a lost lease: %v", err)
		}
		_ = le.Unlock(ctxT(t, 5*time.Second))
	})

	t.Run("MinorityUnreachableStillExtends", func(t *testing.T) {
		// The token is on every node before the partition, so the three
		// nodes left reachable all hold it. The lease (10 minutes; its
		// Locker's amnesia window is that TTL, which allows the 5-minute
		// extension) and, after the Extend, the keys outlive setting up
		// and healing the partition on a loaded machine.
		k := key(t)
		le := r.hold(t, k)
		heal := r.partition(t, 0, 4)
		if err := le.Extend(ctxT(t, time.Minute), 5*time.Minute); err != nil {
			t.Fatal(err)
		}
		heal()
		if err := le.Unlock(ctxT(t, time.Minute)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("BadTTLChangesNothing", func(t *testing.T) {
		// The node timeout is the default one: the Unlock below must hear
		// all five nodes within it.
		l := r.locker(t, quorum.WithTTL(slow(5*time.Second)), quorum.WithAmnesiaWindow(slow(5*time.Second)))
		k := key(t)
		le, err := l.Lock(ctxT(t, 5*time.Second), k)
		if err != nil {
			t.Fatal(err)
		}
		until := le.Until()
		for _, ttl := range []time.Duration{0, -time.Second, time.Millisecond, slow(6 * time.Second)} {
			if err := le.Extend(ctxT(t, 5*time.Second), ttl); err == nil || errors.Is(err, lease.ErrLeaseLost) {
				t.Fatalf("Extend(%v): got %v, want a validation error", ttl, err)
			}
		}
		if le.Err() != nil || !le.Until().Equal(until) {
			t.Fatalf("a rejected Extend changed the lease: %v, %v", le.Err(), le.Until())
		}
		if err := le.Unlock(ctxT(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		if err := le.Extend(ctxT(t, 5*time.Second), slow(5*time.Second)); !errors.Is(err, lease.ErrLeaseLost) || !errors.Is(err, lease.ErrReleased) {
			t.Fatalf("Extend after Unlock: %v", err)
		}
	})
}

// Behaviour 7: Lost and Do.
func TestLostAndDo(t *testing.T) {
	r := newRig(t)

	t.Run("LostClosesWhenValidityRunsOut", func(t *testing.T) {
		rec := &recorder{}
		l := r.locker(t, quorum.WithTTL(slow(300*time.Millisecond)), quorum.WithNodeTimeout(slow(100*time.Millisecond)), quorum.WithObserver(rec))
		le, err := l.Lock(ctxT(t, 30*time.Second), key(t))
		if err != nil {
			t.Fatal(err)
		}
		if le.Err() != nil && time.Now().Before(le.Until()) {
			t.Fatalf("Err() = %v while held", le.Err())
		}
		waitClosed(t, le.Lost(), 3*time.Second, "Lost is closed at Until")
		if !time.Now().After(le.Until()) {
			t.Fatal("Lost closed before Until")
		}
		if !errors.Is(le.Err(), lease.ErrLeaseLost) {
			t.Fatalf("Err() = %v", le.Err())
		}
		if ev := rec.snapshot().lost; len(ev) != 1 || ev[0].Reason != lease.LostExpired {
			t.Fatalf("lost events %+v", ev)
		}
	})

	t.Run("DoKeepsTheLeaseAcrossManyTTLs", func(t *testing.T) {
		rec := &recorder{}
		// The node timeout outlasts a slow fsync on a loaded machine. The
		// TTL is above four node timeouts plus the drift allowance, so
		// that with the default watchdog interval an extension that took
		// a whole node timeout still leaves the next one a whole node
		// timeout before the validity runs out.
		ttl := slow(3 * time.Second)
		opts := []quorum.Option{quorum.WithTTL(ttl), quorum.WithNodeTimeout(slow(600 * time.Millisecond))}
		l := r.locker(t, append(opts, quorum.WithObserver(rec))...)
		rival := r.locker(t, opts...)
		k := key(t)
		err := l.Do(ctxT(t, slow(30*time.Second)), k, func(ctx context.Context, le lease.Lease) error {
			for end := time.Now().Add(2 * ttl); time.Now().Before(end); { // two TTLs
				select {
				case <-ctx.Done():
					return context.Cause(ctx)
				case <-time.After(ttl / 6):
				}
				// The rival never gets the lease: no majority of the five
				// nodes grants it. A majority refuses it (lease.ErrNotAcquired),
				// or, when nodes fail to answer in time, a majority is out
				// of its reach (lease.ErrQuorumUnavailable).
				rl, err := rival.TryLock(ctx, k)
				var qe *quorum.QuorumError
				switch {
				case err == nil:
					t.Errorf("the rival acquired the lock during Do (token %s)", rl.Token())
					_ = rl.Unlock(context.WithoutCancel(ctx))
				case errors.As(err, &qe) && qe.Confirmed < 3 &&
					(errors.Is(err, lease.ErrNotAcquired) || errors.Is(err, lease.ErrQuorumUnavailable)):
				default:
					t.Errorf("rival TryLock during Do: %v", err)
				}
				if le.Err() != nil {
					return le.Err()
				}
			}
			// A refused TryLock leaves a goroutine that waits for the
			// answers still to come. Let the rival's end (they are not
			// Do's), so that the check after Do sees Do's goroutines alone.
			eventually(t, 5*time.Second, "the rival's attempts end", func() bool {
				return !slices.ContainsFunc(quorumGoroutines(), func(g string) bool {
					return strings.Contains(g, "quorum.(*Locker).drain")
				})
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		noQuorumGoroutines(t, 50*time.Millisecond)
		if got := r.count(t, k, ""); got != 5 {
			t.Fatalf("key left on %d nodes after Do", 5-got)
		}
		s := rec.snapshot()
		if len(s.extends) < 3 || len(s.lost) != 0 {
			t.Fatalf("%d extensions, %d losses", len(s.extends), len(s.lost))
		}
	})

	t.Run("DoReturnsFnError", func(t *testing.T) {
		l := r.locker(t)
		k := key(t)
		boom := errors.New("boom")
		err := l.Do(ctxT(t, 5*time.Second), k, func(ctx context.Context, le lease.Lease) error { return boom })
		if !errors.Is(err, boom) || errors.Is(err, lease.ErrLeaseLost) {
			t.Fatalf("got %v, want boom alone", err)
		}
		noQuorumGoroutines(t, 50*time.Millisecond)
		if got := r.count(t, k, ""); got != 5 {
			t.Fatalf("key left on %d nodes after Do", 5-got)
		}
	})

	t.Run("DoDoesNotRunFnWithoutTheLock", func(t *testing.T) {
		l := r.locker(t, quorum.WithMaxWait(200*time.Millisecond))
		k := key(t)
		r.setOn(t, k, "other-owner", 10*time.Minute, 0, 1, 2, 3, 4)
		ran := false
		err := l.Do(ctxT(t, 5*time.Second), k, func(context.Context, lease.Lease) error { ran = true; return nil })
		if ran || !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("ran=%v err=%v", ran, err)
		}
		noQuorumGoroutines(t, 50*time.Millisecond)
	})

	t.Run("DoCancelsFnWhenTheLeaseIsLost", func(t *testing.T) {
		rec := &recorder{}
		l := r.locker(t, quorum.WithTTL(slow(600*time.Millisecond)), quorum.WithNodeTimeout(slow(150*time.Millisecond)), quorum.WithObserver(rec))
		k := key(t)
		var cause error
		var early bool
		err := l.Do(ctxT(t, 10*time.Second), k, func(ctx context.Context, le lease.Lease) error {
			r.partition(t, 0, 2, 4)
			select {
			case <-ctx.Done():
				// The watchdog cannot extend: fn is stopped while the
				// lease is still valid (the safety margin), not after.
				early = time.Now().Before(le.Until())
				cause = context.Cause(ctx)
				return ctx.Err()
			case <-time.After(slow(5 * time.Second)):
				return errors.New("fn's context was not cancelled")
			}
		})
		if !errors.Is(cause, lease.ErrLeaseLost) {
			t.Fatalf("cause %v, want ErrLeaseLost", cause)
		}
		if !errors.Is(err, lease.ErrLeaseLost) || !errors.Is(err, context.Canceled) {
			t.Fatalf("Do: %v, want fn's error joined with ErrLeaseLost", err)
		}
		if !early {
			t.Fatal("fn's context was cancelled only after Until")
		}
		noQuorumGoroutines(t, 50*time.Millisecond)
	})

	t.Run("DoReleasesWhenFnPanics", func(t *testing.T) {
		l := r.locker(t)
		k := key(t)
		func() {
			defer func() {
				if p := recover(); p != "fn panicked" {
					t.Fatalf("recovered %v", p)
				}
			}()
			_ = l.Do(ctxT(t, 5*time.Second), k, func(context.Context, lease.Lease) error { panic("fn panicked") })
		}()
		noQuorumGoroutines(t, 50*time.Millisecond)
		if got := r.count(t, k, ""); got != 5 {
			t.Fatalf("key left on %d nodes after a panic", 5-got)
		}
	})

	t.Run("DoPassesParentCancellation", func(t *testing.T) {
		l := r.locker(t)
		k := key(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		err := l.Do(ctx, k, func(ctx context.Context, le lease.Lease) error {
			cancel()
			<-ctx.Done()
			return ctx.Err()
		})
		if !errors.Is(err, context.Canceled) || errors.Is(err, lease.ErrLeaseLost) {
			t.Fatalf("got %v", err)
		}
		noQuorumGoroutines(t, 50*time.Millisecond)
		if got := r.count(t, k, ""); got != 5 {
			t.Fatalf("key left on %d nodes: the release must not use the cancelled context", 5-got)
		}
	})
}
