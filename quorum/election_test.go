package quorum_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/quorum"
)

// electionTTL is the candidates' lease TTL: above twice the rig's node
// timeout, so a lease can be extended within its validity.
func electionTTL() time.Duration { return slow(3 * time.Second) }

// candidate returns a handle on the election name, on a Locker of its own
// over clients (the rig's when nil) with the Fencer f shared by every
// candidate, as a database's sequence would be.
func candidate(t *testing.T, r *rig, f *memFencer, name string, clients []redis.UniversalClient) (*quorum.Locker, lease.Election) {
	t.Helper()
	if clients == nil {
		clients = r.clients
	}
	l, err := quorum.New(clients, quorum.WithNodeTimeout(slow(time.Second)), quorum.WithTTL(electionTTL()), quorum.WithFencer(f))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	e, err := l.Election(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := e.(*quorum.Election); !ok {
		t.Fatalf("Election returned a %T, want a *quorum.Election", e)
	}
	return l, e
}

// campaign runs Campaign and fails the test on error.
func campaign(t *testing.T, e lease.Election, value string) lease.Lease {
	t.Helper()
	le, err := e.Campaign(ctxT(t, slow(30*time.Second)), value)
	if err != nil {
		t.Fatalf("campaign %s: %v", value, err)
	}
	return le
}

func resign(t *testing.T, e lease.Election) {
	t.Helper()
	if err := e.Resign(ctxT(t, slow(10*time.Second))); err != nil {
		t.Fatalf("resign: %v", err)
	}
}

// wantLeader fails unless Leader returns value and term.
func wantLeader(t *testing.T, e lease.Election, value string, term int64) {
	t.Helper()
	got, err := e.Leader(ctxT(t, slow(10*time.Second)))
	if err != nil || got != (lease.Leader{Value: value, Term: term}) {
		t.Fatalf("Leader: %+v, %v; want %s at term %d", got, err, value, term)
	}
}

// refused returns how many script answers 0 the hook has seen.
func refused(h *heldAnswers) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seen
}

type campaignResult struct {
	i   int
	le  lease.Lease
	err error
}

func TestElection(t *testing.T) {
	r := newRig(t)

	t.Run("OneLeaderAmongThreeUntilItResigns", func(t *testing.T) {
		f, h, name := &memFencer{}, newHeldAnswers(1<<30), key(t)
		var es []lease.Election
		for range 3 {
			_, e := candidate(t, r, f, name, r.hookedClients(t, h))
			es = append(es, e)
		}
		results := make(chan campaignResult, len(es))
		ctx := ctxT(t, slow(time.Minute))
		for i, e := range es {
			go func() {
				le, err := e.Campaign(ctx, fmt.Sprint("c", i))
				results <- campaignResult{i, le, err}
			}()
		}
		var last int64
		for round := range es {
			var res campaignResult
			select {
			case res = <-results:
			case <-time.After(slow(30 * time.Second)):
				t.Fatalf("round %d: no candidate elected", round)
			}
			if res.err != nil {
				t.Fatalf("round %d: candidate %d: %v", round, res.i, res.err)
			}
			if res.le.Fence() <= last {
				t.Fatalf("round %d: term %d after %d", round, res.le.Fence(), last)
			}
			last = res.le.Fence()
			wantLeader(t, es[res.i], fmt.Sprint("c", res.i), last)
			// The others keep being refused, and none is elected meanwhile.
			if round < len(es)-1 {
				base := refused(h)
				eventually(t, 30*time.Second, "the other candidates were refused again", func() bool { return refused(h) >= base+9 })
			}
			select {
			case other := <-results:
				t.Fatalf("round %d: candidate %d elected while %d leads (%v)", round, other.i, res.i, other.err)
			default:
			}
			if res.le.Err() != nil {
				t.Fatalf("round %d: the leader's lease ended: %v", round, res.le.Err())
			}
			resign(t, es[res.i])
		}
	})

	t.Run("TermsIncreaseAcrossResignAndExpiry", func(t *testing.T) {
		f, name := &memFencer{}, key(t)
		_, e1 := candidate(t, r, f, name, nil)
		l2, e2 := candidate(t, r, f, name, nil)
		_, e3 := candidate(t, r, f, name, nil)
		if _, err := e1.Leader(ctxT(t, slow(10*time.Second))); !errors.Is(err, lease.ErrNoLeader) {
			t.Fatalf("Leader before any campaign: %v, want ErrNoLeader", err)
		}
		le1 := campaign(t, e1, "one")
		wantLeader(t, e3, "one", le1.Fence())
		resign(t, e1)
		if _, err := e3.Leader(ctxT(t, slow(10*time.Second))); !errors.Is(err, lease.ErrNoLeader) {
			t.Fatalf("Leader after the resignation: %v, want ErrNoLeader", err)
		}
		le2 := campaign(t, e2, "two")
		if le2.Fence() <= le1.Fence() {
			t.Fatalf("term %d after %d", le2.Fence(), le1.Fence())
		}
		// A leader whose process stops: its lease runs out, and it learns
		// so (Lost) no later than the next leader is elected.
		if err := l2.Close(); err != nil {
			t.Fatal(err)
		}
		le3 := campaign(t, e3, "three")
		if time.Now().Before(le2.Until()) {
			t.Fatalf("elected %v before the previous leader's validity ended", time.Until(le2.Until()))
		}
		waitClosed(t, le2.Lost(), time.Second, "the stopped leader's Lost")
		if le3.Fence() <= le2.Fence() {
			t.Fatalf("term %d after %d", le3.Fence(), le2.Fence())
		}
		wantLeader(t, e1, "three", le3.Fence())
		if err := e2.Resign(ctxT(t, slow(10*time.Second))); !errors.Is(err, lease.ErrNotLeader) || !errors.Is(err, lease.ErrLeaseLost) {
			t.Fatalf("Resign of the expired leader: %v, want ErrNotLeader and ErrLeaseLost", err)
		}
		// The lease's Unlock resigns too.
		if err := le3.Unlock(ctxT(t, slow(10*time.Second))); err != nil {
			t.Fatal(err)
		}
		if _, err := e1.Leader(ctxT(t, slow(10*time.Second))); !errors.Is(err, lease.ErrNoLeader) {
			t.Fatalf("Leader after Unlock: %v, want ErrNoLeader", err)
		}
		if err := e3.Resign(ctxT(t, slow(10*time.Second))); !errors.Is(err, lease.ErrNotLeader) {
			t.Fatalf("Resign after Unlock: %v, want ErrNotLeader", err)
		}
	})

	t.Run("ObserveDeliversLeadersInTermOrder", func(t *testing.T) {
		f, name := &memFencer{}, key(t)
		_, e1 := candidate(t, r, f, name, nil)
		_, e2 := candidate(t, r, f, name, nil)
		_, e3 := candidate(t, r, f, name, nil)
		_, watcher := candidate(t, r, f, name, nil)
		le1 := campaign(t, e1, "one")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ch := watcher.Observe(ctx)
		next := func(want string) lease.Leader {
			t.Helper()
			select {
			case ld, ok := <-ch:
				if !ok || ld.Value != want {
					t.Fatalf("observed %+v (open %v), want %s", ld, ok, want)
				}
				return ld
			case <-time.After(slow(30 * time.Second)):
				t.Fatalf("%s not observed", want)
			}
			return lease.Leader{}
		}
		if got := next("one"); got.Term != le1.Fence() {
			t.Fatalf("observed term %d, want %d", got.Term, le1.Fence())
		}
		resign(t, e1)
		le2 := campaign(t, e2, "two") // may come and go between two reads
		resign(t, e2)
		le3 := campaign(t, e3, "three")
		if got := next("two"); got.Term != le2.Fence() {
			t.Fatalf("observed term %d, want %d", got.Term, le2.Fence())
		}
		if got := next("three"); got.Term != le3.Fence() {
			t.Fatalf("observed term %d, want %d", got.Term, le3.Fence())
		}
		cancel()
		for range ch { // closed once ctx ended: no goroutine left
		}
		resign(t, e3)
	})

	t.Run("LeaderWhoseKeyIsGoneLosesAndIsSucceeded", func(t *testing.T) {
		f, name := &memFencer{}, key(t)
		_, e1 := candidate(t, r, f, name, nil)
		_, e2 := candidate(t, r, f, name, nil)
		le1 := campaign(t, e1, "one")
		results := make(chan campaignResult, 1)
		go func() {
			le, err := e2.Campaign(ctxT(t, slow(time.Minute)), "two")
			results <- campaignResult{2, le, err}
		}()
		for i := range r.admin { // the nodes forget the lock key
			if err := r.admin[i].Del(ctxT(t, 10*time.Second), name).Err(); err != nil {
				t.Fatal(err)
			}
		}
		waitClosed(t, le1.Lost(), 2*electionTTL(), "the leader's Lost once its key is gone")
		if err := le1.Err(); !errors.Is(err, lease.ErrLeaseLost) {
			t.Fatalf("the lost leader's Err: %v, want ErrLeaseLost", err)
		}
		var res campaignResult
		select {
		case res = <-results:
		case <-time.After(slow(30 * time.Second)):
			t.Fatal("no successor elected")
		}
		if res.err != nil {
			t.Fatal(res.err)
		}
		if res.le.Fence() <= le1.Fence() {
			t.Fatalf("successor's term %d after %d", res.le.Fence(), le1.Fence())
		}
		wantLeader(t, e1, "two", res.le.Fence())
		if err := e1.Resign(ctxT(t, slow(10*time.Second))); !errors.Is(err, lease.ErrNotLeader) {
			t.Fatalf("Resign of the lost leader: %v, want ErrNotLeader", err)
		}
		resign(t, e2)
	})

	t.Run("BadUse", func(t *testing.T) {
		if _, err := r.locker(t).Election("x"); !errors.Is(err, lease.ErrNoFencer) {
			t.Fatalf("Election without a Fencer: %v, want ErrNoFencer", err)
		}
		l := r.locker(t, quorum.WithTTL(electionTTL()), quorum.WithFencer(&memFencer{}))
		if _, err := l.Election(""); err == nil {
			t.Fatal("Election with an empty name: no error")
		}
		_, e1 := candidate(t, r, &memFencer{}, key(t), nil)
		_, e2 := candidate(t, r, &memFencer{}, key(t), nil)
		if err := e1.Resign(ctxT(t, slow(10*time.Second))); !errors.Is(err, lease.ErrNotLeader) {
			t.Fatalf("Resign before a campaign: %v, want ErrNotLeader", err)
		}
		campaign(t, e1, "one")
		if _, err := e1.Campaign(ctxT(t, slow(10*time.Second)), "again"); err == nil {
			t.Fatal("a second Campaign of a leading handle: no error")
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := e2.Campaign(ctx, "two"); !errors.Is(err, context.Canceled) {
			t.Fatalf("Campaign on an ended context: %v, want context.Canceled", err)
		}
		resign(t, e1)
	})
}

// The leader script on its own, against one real master.
func TestElectionScript(t *testing.T) {
	r := newRig(t)
	src, err := os.ReadFile("scripts/leader.lua")
	if err != nil {
		t.Fatal(err)
	}
	s, rdb, ctx := redis.NewScript(string(src)), r.admin[0], ctxT(t, slow(time.Minute))
	keys := []string{"e:leader", "e:leaders"}
	run := func(args ...any) int64 {
		t.Helper()
		v, err := s.Run(ctx, rdb, keys, args...).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	publish := func(term int64, value string) int64 {
		t.Helper()
		return run("publish", term, fmt.Sprintf("%d:%s", term, value), time.Minute.Milliseconds(), 3, time.Hour.Milliseconds())
	}
	history := func() []string {
		t.Helper()
		h, err := rdb.LRange(ctx, keys[1], 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	for range 2 { // a republication of the same term only refreshes
		if publish(5, "a:b") != 1 {
			t.Fatal("publish refused")
		}
	}
	if v := r.value(t, keys[0], 0); v != "5:a:b" {
		t.Fatalf("leader %q", v)
	}
	if h := history(); len(h) != 1 || h[0] != "5:a:b" {
		t.Fatalf("history %q: want one entry", h)
	}
	if d := rdb.PTTL(ctx, keys[0]).Val(); d <= 0 || d > time.Minute {
		t.Fatalf("leader PTTL %v", d)
	}
	if publish(3, "old") != 0 || r.value(t, keys[0], 0) != "5:a:b" {
		t.Fatal("a lower term replaced the leader")
	}
	if run("retract", 3) != 0 || run("retract", 5) != 1 || r.value(t, keys[0], 0) != "" {
		t.Fatal("retract deleted another term's leader, or not its own")
	}
	if publish(4, "late") != 0 {
		t.Fatal("a term below the history's last was published")
	}
	for term := int64(6); term <= 9; term++ {
		publish(term, "n")
	}
	if h := history(); len(h) != 3 || h[0] != "7:n" || h[2] != "9:n" {
		t.Fatalf("history %q: want the last three", h)
	}
	if d := rdb.PTTL(ctx, keys[1]).Val(); d <= time.Minute || d > time.Hour {
		t.Fatalf("history PTTL %v", d)
	}
}
