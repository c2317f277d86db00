package quorum_test

import (
	"errors"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/quorum"
)

// holdOnExactMajority acquires k while nodes 3 and 4 are cut off, so the
// lease is held on nodes 0, 1 and 2 only.
func holdOnExactMajority(t *testing.T, r *rig, l *quorum.Locker, k string) lease.Lease {
	t.Helper()
	heal := r.partition(t, 3, 4)
	le, err := l.Lock(ctxT(t, 10*time.Second), k)
	if err != nil {
		t.Fatal(err)
	}
	heal()
	if got := r.values(t, k); got[0] != le.Token() || got[1] != le.Token() || got[2] != le.Token() || got[3] != "" || got[4] != "" {
		t.Fatalf("want the lease on nodes 0-2 only, values %q", got)
	}
	return le
}

// restartEmpty kills node i and starts it again without its data.
func restartEmpty(t *testing.T, r *rig, i int) {
	t.Helper()
	ctx := ctxT(t, time.Minute)
	if err := r.nodes[i].Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.nodes[i].Restart(ctx, false); err != nil {
		t.Fatal(err)
	}
	r.reconnectAdmin(t, i)
	if got := r.value(t, quorum.BootMarkerKey, i); got != "" {
		t.Fatalf("node %d restarted with its marker %q: it kept its data", i, got)
	}
}

// Behaviour 8: a node that restarted without its data must not vote until
// one max TTL has passed, or two clients hold the same lock.
func TestAmnesiaGuard(t *testing.T) {
	// The first lease must stay valid through a partition, a heal, a kill
	// and a restart, which take long on a loaded machine with containers.
	const ttl = 5 * time.Minute

	t.Run("RestartedEmptyNodeCannotVoteInsideTheWindow", func(t *testing.T) {
		r := newRig(t)
		opts := []quorum.Option{quorum.WithTTL(ttl), quorum.WithAmnesiaWindow(ttl)}
		first, second := r.locker(t, opts...), r.locker(t, opts...)
		k := key(t)
		le := holdOnExactMajority(t, r, first, k)
		restartEmpty(t, r, 2)

		// Nodes 0 and 1 still hold the first lease, 3 and 4 are free, and
		// node 2 forgot it. Without the guard node 2 would be the third
		// vote. Try repeatedly while the first lease is valid: the first
		// tries may also meet connections broken by the restart.
		warming := false
		for i := range 10 {
			if time.Until(le.Until()) < time.Second {
				t.Fatalf("the first lease ran out after %d tries", i)
			}
			got, err := second.TryLock(ctxT(t, 10*time.Second), k)
			if err == nil {
				t.Fatalf("double grant: %q and %q both hold %s; values %q", le.Token(), got.Token(), k, r.values(t, k))
			}
			if !errors.Is(err, lease.ErrQuorumUnavailable) {
				t.Fatalf("try %d: got %v, want ErrQuorumUnavailable", i, err)
			}
			warming = warming || errors.Is(err, quorum.ErrNodeWarming)
			time.Sleep(50 * time.Millisecond)
		}
		if !warming {
			t.Fatal("node 2 never answered warming: the guard did not act")
		}
		if got := r.value(t, k, 2); got != "" {
			t.Fatalf("the warming node holds %q", got)
		}
		if le.Err() != nil {
			t.Fatalf("first lease: %v", le.Err())
		}
		// Unlock tells the truth: only nodes 0 and 1 still had the token.
		if err := le.Unlock(ctxT(t, 10*time.Second)); !errors.Is(err, lease.ErrLeaseLost) {
			t.Fatalf("Unlock: got %v, want ErrLeaseLost (the lease was left on 2 nodes)", err)
		}
	})

	// The negative control: the same steps with the guard off end with two
	// holders, which shows the test above can fail.
	t.Run("WithoutTheGuardTheLockIsGrantedTwice", func(t *testing.T) {
		r := newRig(t)
		opts := []quorum.Option{quorum.WithTTL(ttl), quorum.WithAmnesiaGuard(false)}
		first, second := r.locker(t, opts...), r.locker(t, opts...)
		k := key(t)
		le := holdOnExactMajority(t, r, first, k)
		restartEmpty(t, r, 2)

		var double lease.Lease
		for i := 0; double == nil && i < 10; i++ {
			l, err := second.TryLock(ctxT(t, 10*time.Second), k)
			if err == nil {
				double = l
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if double == nil {
			t.Fatal("no double grant without the guard: the amnesia scenario was not reproduced")
		}
		now := time.Now()
		if !now.Before(le.Until()) || !now.Before(double.Until()) || le.Err() != nil {
			t.Fatal("the two leases were not valid at the same time")
		}
		got := r.values(t, k)
		if got[2] != double.Token() || got[0] != le.Token() {
			t.Fatalf("values %q: node 2 should have voted for the second lease", got)
		}
		t.Logf("double grant reproduced: values %q", got)
		_ = le.Unlock(ctxT(t, 10*time.Second))
		_ = double.Unlock(ctxT(t, 10*time.Second))
	})
}
