package quorum_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/quorum"
)

// memFencer is an in-memory Fencer: a counter per key.
type memFencer struct {
	mu    sync.Mutex
	next  map[string]int64
	err   error
	delay time.Duration
	calls int
}

func (f *memFencer) Next(ctx context.Context, key string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.delay > 0 {
		time.Sleep(f.delay)
	}
	if f.err != nil {
		return 0, f.err
	}
	if f.next == nil {
		f.next = map[string]int64{}
	}
	f.next[key]++
	return f.next[key], nil
}

func TestFencer(t *testing.T) {
	r := newRig(t)

	t.Run("EveryLeaseCarriesAStrictlyIncreasingFence", func(t *testing.T) {
		f := &memFencer{}
		l := r.locker(t, quorum.WithFencer(f))
		k := key(t)
		var last int64
		for range 5 {
			le, err := l.Lock(ctxT(t, 5*time.Second), k)
			if err != nil {
				t.Fatal(err)
			}
			if le.Fence() <= last {
				t.Fatalf("fence %d after %d", le.Fence(), last)
			}
			last = le.Fence()
			if err := le.Unlock(ctxT(t, 5*time.Second)); err != nil {
				t.Fatal(err)
			}
		}
		err := l.Do(ctxT(t, 5*time.Second), k, func(ctx context.Context, le lease.Lease) error {
			if le.Fence() != last+1 {
				t.Errorf("Do: fence %d, want %d", le.Fence(), last+1)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})

	t.Run("FencerErrorReleasesAndIsNotRetried", func(t *testing.T) {
		boom := errors.New("fence store down")
		f := &memFencer{err: boom}
		rec := &recorder{}
		l := r.locker(t, quorum.WithFencer(f), quorum.WithObserver(rec))
		k := key(t)
		_, err := l.Lock(ctxT(t, 5*time.Second), k)
		if !errors.Is(err, boom) {
			t.Fatalf("got %v, want the fencer's error", err)
		}
		if f.calls != 1 {
			t.Fatalf("fencer called %d times, want 1 (no retry)", f.calls)
		}
		if ev := rec.snapshot().acquires; len(ev) != 1 || ev[0].Result != lease.ResultError || ev[0].Attempts != 1 {
			t.Fatalf("acquire events %+v", ev)
		}
		eventually(t, 2*time.Second, "the won nodes are released", func() bool { return r.count(t, k, "") == 5 })
	})

	// A fence that arrives after the validity ran out would let a late
	// holder write: the lease is released and the attempt fails.
	t.Run("FenceAfterValidityFails", func(t *testing.T) {
		// The fencer answers after the whole TTL, so always after the
		// validity; the node timeout leaves the vote time to be won.
		f := &memFencer{delay: slow(600 * time.Millisecond)}
		l := r.locker(t, quorum.WithTTL(slow(500*time.Millisecond)), quorum.WithNodeTimeout(slow(200*time.Millisecond)), quorum.WithFencer(f))
		k := key(t)
		// On a loaded machine a vote may not be won within the short node
		// timeout (the fencer is then not called): try again, on released
		// nodes, until one is. Every attempt fails with
		// lease.ErrQuorumUnavailable, a lost vote (the key is free, so no node
		// refuses it) as well as a late fence.
		var err error
		for try := 1; f.calls == 0; try++ {
			if try > 10 {
				t.Fatalf("fencer called %d times, want 1: no vote was won in %d attempts, so the late fence was not tested", f.calls, try-1)
			}
			_, err = l.TryLock(ctxT(t, 30*time.Second), k)
			if !errors.Is(err, lease.ErrQuorumUnavailable) {
				t.Fatalf("attempt %d: got %v, want ErrQuorumUnavailable", try, err)
			}
			eventually(t, 2*time.Second, "the nodes are released", func() bool { return r.count(t, k, "") == 5 })
		}
		if f.calls != 1 {
			t.Fatalf("fencer called %d times, want 1", f.calls)
		}
	})
}

// Behaviour 11: the Observer sees acquisitions, node errors, extensions,
// releases (with not-owner answers) and losses.
func TestObserver(t *testing.T) {
	r := newRig(t)
	rec := &recorder{}
	l := r.locker(t, quorum.WithTTL(slow(2*time.Second)), quorum.WithNodeTimeout(slow(500*time.Millisecond)), quorum.WithObserver(rec))
	k := key(t)

	heal := r.partition(t, 4)
	le, err := l.Lock(ctxT(t, 5*time.Second), k)
	if err != nil {
		t.Fatal(err)
	}
	if err := le.Extend(ctxT(t, 5*time.Second), slow(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	// Heal only once node 4's requests have failed: the partition holds
	// back the bytes, and a request still waiting when it heals may be
	// answered after all.
	eventually(t, 10*time.Second, "node 4's acquire and extend requests fail", func() bool {
		var acq, ext bool
		for _, e := range rec.snapshot().nodeErrs {
			acq = acq || (e.Node == 4 && e.Op == quorum.OpAcquire.String())
			ext = ext || (e.Node == 4 && e.Op == quorum.OpExtend.String())
		}
		return acq && ext
	})
	heal()
	waitClosed(t, le.Lost(), 5*time.Second, "the lease expires")
	r.setOn(t, k, "other-owner", 10*time.Minute, 0, 1, 2, 3, 4)
	_ = le.Unlock(ctxT(t, 5*time.Second))
	// The release event comes when every node has answered.
	eventually(t, 10*time.Second, "the release event", func() bool { return len(rec.snapshot().releases) == 1 })

	s := rec.snapshot()
	if len(s.acquires) != 1 || s.acquires[0].Result != lease.ResultAcquired || s.acquires[0].Attempts != 1 || s.acquires[0].Key != k {
		t.Fatalf("acquire events %+v", s.acquires)
	}
	var acqErr, extErr bool
	for _, e := range s.nodeErrs {
		if e.Node != 4 || e.Addr != r.nodes[4].Addr() || e.Err == nil || e.Key != k {
			t.Fatalf("node error event %+v, want node 4 only", e)
		}
		acqErr = acqErr || e.Op == quorum.OpAcquire.String()
		extErr = extErr || e.Op == quorum.OpExtend.String()
	}
	if !acqErr || !extErr {
		t.Fatalf("node error events %+v: want node 4 in acquire and extend", s.nodeErrs)
	}
	if len(s.extends) != 1 || s.extends[0].Err != nil || s.extends[0].Confirmed < 3 || s.extends[0].Confirmed > 4 {
		t.Fatalf("extend events %+v", s.extends)
	}
	if len(s.lost) != 1 || s.lost[0].Reason != lease.LostExpired || s.lost[0].Held <= 0 {
		t.Fatalf("lost events %+v", s.lost)
	}
	if len(s.releases) != 1 || s.releases[0].NotOwner != 5 || s.releases[0].Released != 0 || s.releases[0].Failed != 0 {
		t.Fatalf("release events %+v, want 5 not-owner answers", s.releases)
	}
}
