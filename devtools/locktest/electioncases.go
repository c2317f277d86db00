package locktest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/lease"
)

// electionOneLeader: three candidates on three Lockers campaign at once;
// one leads at a time (the others' Campaign calls keep waiting), Leader
// names it with its term, and each Resign lets the next one lead with a
// greater term.
func (s suite) electionOneLeader(t *testing.T) {
	const n = 3
	observer := s.election(t, t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	cands := make([]lease.Election, n)
	won := make(chan acquired, n)
	for i := range cands {
		cands[i] = s.election(t, t.Name())
		wg.Go(func() {
			le, err := cands[i].Campaign(ctx, fmt.Sprint("candidate-", i))
			won <- acquired{i, le, err}
		})
	}
	var term int64
	for round := range n {
		w := next(t, won, time.Minute, "Campaign")
		if w.le.Fence() <= term {
			t.Fatalf("round %d: candidate-%d leads with term %d after term %d", round, w.who, w.le.Fence(), term)
		}
		term = w.le.Fence()
		if round < n-1 {
			none(t, won, 300*time.Millisecond, fmt.Sprintf("a second Campaign returned while candidate-%d leads", w.who))
		}
		leader, err := observer.Leader(ctxT(t, time.Minute))
		if want := (lease.Leader{Value: fmt.Sprint("candidate-", w.who), Term: term}); err != nil || leader != want {
			t.Fatalf("round %d: Leader %+v, %v; want %+v", round, leader, err, want)
		}
		if err := cands[w.who].Resign(ctxT(t, time.Minute)); err != nil {
			t.Fatal(err)
		}
		lostWithin(t, w.le, 30*time.Second, "the resigned leadership")
	}
}

// electionLeaderAndObserve: Leader returns the leader's value and term,
// and an observer sees the leaders one after the other in increasing term
// order; its channel closes when its context ends.
func (s suite) electionLeaderAndObserve(t *testing.T) {
	observer := s.election(t, t.Name())
	octx, ocancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer ocancel()
	seen := observer.Observe(octx)
	var last int64
	for _, value := range []string{"a", "b"} {
		e := s.election(t, t.Name())
		le := must(t)(e.Campaign(ctxT(t, time.Minute), value))
		want := lease.Leader{Value: value, Term: le.Fence()}
		if l, err := observer.Leader(ctxT(t, time.Minute)); err != nil || l != want {
			t.Fatalf("Leader %+v, %v; want %+v", l, err, want)
		}
		last = observed(t, seen, want, last)
		if err := e.Resign(ctxT(t, time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	ocancel()
	for range 100 { // a few leaders may still be on their way
		select {
		case l, ok := <-seen:
			if !ok {
				return
			}
			if l.Term <= last {
				t.Fatalf("observed term %d after %d", l.Term, last)
			}
			last = l.Term
		case <-time.After(30 * time.Second):
			t.Fatal("Observe's channel open 30s after its context ended")
		}
	}
	t.Fatal("Observe's channel still delivering after its context ended")
}

// observed reads leaders from seen until want arrives, each with a term
// above the previous one's (from last), and returns want's term.
func observed(t *testing.T, seen <-chan lease.Leader, want lease.Leader, last int64) int64 {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for range 100 {
		select {
		case l, ok := <-seen:
			if !ok {
				t.Fatalf("Observe's channel closed before %+v", want)
			}
			if l.Term <= last {
				t.Fatalf("observed %+v after term %d: terms must increase", l, last)
			}
			if last = l.Term; l == want {
				return last
			}
		case <-timeout:
			t.Fatalf("%+v not observed in 30s", want)
		}
	}
	t.Fatalf("%+v not among 100 leaders observed", want)
	return 0
}

// electionNoLeader: an election nobody won, and one whose only leader
// resigned, have no leader.
func (s suite) electionNoLeader(t *testing.T) {
	e := s.election(t, t.Name())
	if l, err := e.Leader(ctxT(t, time.Minute)); !errors.Is(err, lease.ErrNoLeader) {
		t.Fatalf("Leader of an election nobody won: %+v, %v; want ErrNoLeader", l, err)
	}
	le := must(t)(e.Campaign(ctxT(t, time.Minute), "only"))
	if l, err := e.Leader(ctxT(t, time.Minute)); err != nil || l.Value != "only" || l.Term != le.Fence() {
		t.Fatalf("Leader %+v, %v; want only with term %d", l, err, le.Fence())
	}
	if err := e.Resign(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	lostWithin(t, le, 30*time.Second, "the resigned leadership")
	if l, err := s.election(t, t.Name()).Leader(ctxT(t, time.Minute)); !errors.Is(err, lease.ErrNoLeader) {
		t.Fatalf("Leader after the only leader resigned: %+v, %v; want ErrNoLeader", l, err)
	}
}
