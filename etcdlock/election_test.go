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

// The election on one 3-member cluster; each subtest has a name of its
// own.
func TestElection(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Etcd: 3})
	admin := newClient(t, bed)
	t.Run("Succession", func(t *testing.T) { testElectSuccession(t, bed, admin) })
	t.Run("LostOnRevoke", func(t *testing.T) { testElectLostOnRevoke(t, bed, admin) })
	t.Run("LostBeforeNextLeader", func(t *testing.T) { testElectLostBeforeNext(t, bed, admin) })
	t.Run("FencerTerm", func(t *testing.T) { testElectFencerTerm(t, bed) })
	t.Run("CampaignGivesUp", func(t *testing.T) { testElectGivesUp(t, bed, admin) })
	t.Run("ObserveEndsAtClose", func(t *testing.T) { testElectObserveEnds(t, bed) })
}

// newElection returns l's candidate in the election name.
func newElection(t *testing.T, l *etcdlock.Locker, name string) lease.Election {
	t.Helper()
	e, err := l.Election(name)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// observer collects what Observe delivers until its context ends.
type observer struct {
	ch     <-chan lease.Leader
	cancel context.CancelFunc
}

// next waits up to 10s for the next leader delivered.
func (o *observer) next(t *testing.T) lease.Leader {
	t.Helper()
	select {
	case ld, ok := <-o.ch:
		if !ok {
			t.Fatal("Observe closed its channel early")
		}
		return ld
	case <-time.After(10 * time.Second):
		t.Fatal("Observe delivered nothing within 10s")
	}
	return lease.Leader{}
}

// close ends the observation and checks that the channel closes, with
// nothing left undelivered.
func (o *observer) close(t *testing.T) {
	t.Helper()
	o.cancel()
	select {
	case ld, ok := <-o.ch:
		if ok {
			t.Fatalf("Observe delivered %+v after the last leader", ld)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Observe did not close its channel when its context ended")
	}
}

// Three candidates on three Lockers: one leads at a time; the next takes
// office when the leader resigns, then when its Locker closes, each with
// a greater term, and Leader and Observe follow in order. Resign of a
// candidate that does not lead fails with ErrNotLeader; Leader of an
// election with no leader with ErrNoLeader.
func testElectSuccession(t *testing.T, bed *testbed.Bed, admin *clientv3.Client) {
	var cands []lease.Election
	var lockers []*etcdlock.Locker
	for range 3 {
		l := newLocker(t, bed, etcdlock.WithTTL(sessionTTL))
		lockers = append(lockers, l)
		cands = append(cands, newElection(t, l, "succ"))
	}
	watcher := newElection(t, newLocker(t, bed, etcdlock.WithTTL(sessionTTL)), "succ")
	if _, err := watcher.Leader(ctxT(t)); !errors.Is(err, lease.ErrNoLeader) {
		t.Fatalf("Leader before any campaign: %v, want ErrNoLeader", err)
	}
	octx, cancel := context.WithCancel(ctxT(t))
	obs := &observer{ch: watcher.Observe(octx), cancel: cancel}
	first, err := cands[0].Campaign(ctxT(t), "a")
	if err != nil {
		t.Fatal(err)
	}
	waiting := make([]<-chan got, 3)
	for i := 1; i < 3; i++ {
		waiting[i] = later(t, func(ctx context.Context) (lease.Lease, error) { return cands[i].Campaign(ctx, string(rune('a'+i))) })
		waitFor(t, "the candidacy", func() bool { return countKeys(t, admin, "quorumlock/succ/") == int64(i+1) })
	}
	checkLeader(t, watcher, obs, "a", first.Fence())
	if err := cands[1].Resign(ctxT(t)); !errors.Is(err, lease.ErrNotLeader) {
		t.Fatalf("Resign of a candidate that waits: %v, want ErrNotLeader", err)
	}
	pending(t, waiting[1], "the second candidate, the first leading")
	if err := cands[0].Resign(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	mustLose(t, first, lease.ErrReleased, time.Second)
	second := await(t, waiting[1], 10*time.Second)
	pending(t, waiting[2], "the third candidate, the second leading")
	checkTerms(t, first, second)
	checkLeader(t, watcher, obs, "b", second.Fence())
	if err := lockers[1].Close(); err != nil {
		t.Fatal(err)
	}
	mustLose(t, second, lease.ErrLeaseLost, time.Second)
	third := await(t, waiting[2], 10*time.Second)
	checkTerms(t, second, third)
	checkLeader(t, watcher, obs, "c", third.Fence())
	if _, err := cands[2].Campaign(ctxT(t), "again"); err == nil {
		t.Fatal("a leader campaigned again")
	}
	if err := cands[2].Resign(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "no leader", func() bool { _, err := watcher.Leader(ctxT(t)); return errors.Is(err, lease.ErrNoLeader) })
	obs.close(t)
}

// checkLeader checks that Leader and Observe see value with term.
func checkLeader(t *testing.T, e lease.Election, obs *observer, value string, term int64) {
	t.Helper()
	want := lease.Leader{Value: value, Term: term}
	if ld, err := e.Leader(ctxT(t)); err != nil || ld != want {
		t.Fatalf("Leader %+v (%v), want %+v", ld, err, want)
	}
	if ld := obs.next(t); ld != want {
		t.Fatalf("Observe delivered %+v, want %+v", ld, want)
	}
}

// checkTerms checks that next's term is above prev's, and that its key is
// another candidate's.
func checkTerms(t *testing.T, prev, next lease.Lease) {
	t.Helper()
	if next.Fence() <= prev.Fence() || next.Key() == prev.Key() {
		t.Fatalf("leader %s term %d after %s term %d", next.Key(), next.Fence(), prev.Key(), prev.Fence())
	}
}

// A leader whose session is revoked behind its back loses its leadership
// (at the next refresh); the next candidate takes office with a greater
// term.
func testElectLostOnRevoke(t *testing.T, bed *testbed.Bed, admin *clientv3.Client) {
	a := newElection(t, newLocker(t, bed, etcdlock.WithTTL(sessionTTL)), "revoked")
	b := newElection(t, newLocker(t, bed, etcdlock.WithTTL(sessionTTL)), "revoked")
	first, err := a.Campaign(ctxT(t), "a")
	if err != nil {
		t.Fatal(err)
	}
	if first.Token() != "quorumlock/"+first.Key() {
		t.Fatalf("leadership Key %q Token %q", first.Key(), first.Token())
	}
	next := later(t, func(ctx context.Context) (lease.Lease, error) { return b.Campaign(ctx, "b") })
	if _, err := admin.Revoke(ctxT(t), leaseID(t, first)); err != nil {
		t.Fatal(err)
	}
	mustLose(t, first, lease.ErrLeaseLost, sessionTTL)
	if err := a.Resign(ctxT(t)); !errors.Is(err, lease.ErrNotLeader) {
		t.Fatalf("Resign after the loss: %v, want ErrNotLeader", err)
	}
	checkTerms(t, first, await(t, next, 10*time.Second))
	again, err := a.Campaign(shortCtx(t), "a again") // a new session: waits its turn
	if err == nil {
		_ = again.Unlock(ctxT(t))
		t.Fatal("a second leader was elected")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("campaign while another leads: %v, want the context's deadline", err)
	}
}

// A leader cut off from etcd (its client closed: no refresh gets
// through) loses its leadership at its Until, before etcd expires its
// session's lease and lets the next candidate in.
func testElectLostBeforeNext(t *testing.T, bed *testbed.Bed, admin *clientv3.Client) {
	cli := newClient(t, bed)
	l, err := etcdlock.New(cli, etcdlock.WithTTL(sessionTTL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	first, err := newElection(t, l, "cutoff").Campaign(ctxT(t), "a")
	if err != nil {
		t.Fatal(err)
	}
	b := newElection(t, newLocker(t, bed, etcdlock.WithTTL(sessionTTL)), "cutoff")
	next := later(t, func(ctx context.Context) (lease.Lease, error) { return b.Campaign(ctx, "b") })
	waitFor(t, "the candidacy", func() bool { return countKeys(t, admin, "quorumlock/cutoff/") == 2 })
	if err := cli.Close(); err != nil {
		t.Fatal(err)
	}
	second := await(t, next, 3*sessionTTL)
	at := time.Now()
	select {
	case <-first.Lost():
	default:
		t.Fatalf("a new leader took office while the old one still held its leadership (Until in %v)", time.Until(first.Until()))
	}
	if !first.Until().Before(at) || !errors.Is(first.Err(), lease.ErrLeaseLost) {
		t.Fatalf("the old leader's Until %v after the new one took office; Err %v", first.Until().Sub(at), first.Err())
	}
	checkTerms(t, first, second)
}

// shortCtx returns a context that ends in half a second.
func shortCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	t.Cleanup(cancel)
	return ctx
}

// With a Fencer, the term is the Fencer's token on the election's name,
// and Leader reports it.
func testElectFencerTerm(t *testing.T, bed *testbed.Bed) {
	f := &memFencer{}
	e := newElection(t, newLocker(t, bed, etcdlock.WithTTL(sessionTTL), etcdlock.WithFencer(f)), "fterm")
	for want := int64(1); want <= 2; want++ {
		le, err := e.Campaign(ctxT(t), "v")
		if err != nil {
			t.Fatal(err)
		}
		ld, err := e.Leader(ctxT(t))
		if err != nil || le.Fence() != want || ld.Term != want || f.last("fterm") != want {
			t.Fatalf("term %d, Leader %+v (%v), Fencer's %d; want %d", le.Fence(), ld, err, f.last("fterm"), want)
		}
		if err := e.Resign(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
}

// A campaign whose context ends withdraws its candidacy: its key goes, and
// it does not become leader later.
func testElectGivesUp(t *testing.T, bed *testbed.Bed, admin *clientv3.Client) {
	lead, err := newElection(t, newLocker(t, bed, etcdlock.WithTTL(sessionTTL)), "giveup").Campaign(ctxT(t), "a")
	if err != nil {
		t.Fatal(err)
	}
	_, err = newElection(t, newLocker(t, bed, etcdlock.WithTTL(sessionTTL)), "giveup").Campaign(shortCtx(t), "b")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("campaign with a short context: %v", err)
	}
	waitFor(t, "the withdrawn key gone", func() bool { return countKeys(t, admin, "quorumlock/giveup/") == 1 })
	if err := lead.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, admin, "quorumlock/giveup/"); n != 0 {
		t.Fatalf("%d candidacies after the leader left", n)
	}
}

// Observe ends, and closes its channel, when its Locker closes.
func testElectObserveEnds(t *testing.T, bed *testbed.Bed) {
	l := newLocker(t, bed, etcdlock.WithTTL(sessionTTL))
	obs := &observer{ch: newElection(t, l, "closing").Observe(context.Background()), cancel: func() {}}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	obs.close(t)
	if _, err := newElection(t, l, "closing").Campaign(ctxT(t), "late"); !errors.Is(err, lease.ErrClosed) {
		t.Fatalf("Campaign on a closed Locker: %v, want ErrClosed", err)
	}
}
