package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/quorumlock/quorumlock/lease"
)

const (
	// maxPermits bounds a semaphore's permits: each is a key, and a claim
	// may read them all.
	maxPermits = 1024
	// slotsPerTxn is how many free slots one claim transaction tries,
	// each in the else branch of the one before.
	slotsPerTxn = 16
	// claimRounds bounds the transactions of one claim attempt.
	claimRounds = 4
)

// errFull is a claim's answer when every permit it saw was held.
var errFull = fmt.Errorf("every permit is held: %w", concurrency.ErrLocked)

var _ lease.Semaphore = (*Semaphore)(nil)

// Semaphore admits at most Permits holders at once; each permit is a slot
// key (see the package documentation). Its methods are safe for
// concurrent use.
type Semaphore struct {
	l        *Locker
	name     string
	permits  int
	count    string      // permits in decimal, as stored
	countKey string      // prefix + name + "/permits"
	slots    string      // the slot keys' prefix: prefix + name + "/slot/"
	known    atomic.Bool // the stored count was seen to be this handle's
}

// Semaphore returns the semaphore called name with permits permits (1 to
// 1024). Permit i is the etcd key prefix + name + "/slot/" + i: its
// Lease's Key is name + "/slot/" + i and its Token the etcd key. The count
// is stored at prefix + name + "/permits" (a key with no lease, which
// stays): a handle with another count fails to acquire, with an error
// matching lease.ErrPermitsMismatch, while a permit is held; once none is,
// the first acquisition stores its own count. A name is one primitive's:
// do not use it for a lock, a read-write lock or an election too.
func (l *Locker) Semaphore(name string, permits int) (lease.Semaphore, error) {
	switch {
	case name == "":
		return nil, errors.New("etcdlock: semaphore: empty name")
	case permits < 1 || permits > maxPermits:
		return nil, fmt.Errorf("etcdlock: semaphore %q: %d permits: want 1 to %d", name, permits, maxPermits)
	}
	return &Semaphore{l: l, name: name, permits: permits, count: strconv.Itoa(permits),
		countKey: l.cfg.prefix + name + "/permits", slots: l.cfg.prefix + name + "/slot/"}, nil
}

// Name returns the semaphore's name.
func (sm *Semaphore) Name() string { return sm.name }

// Permits returns the number of permits.
func (sm *Semaphore) Permits() int { return sm.permits }

// Acquire takes a permit, waiting while every permit is held, until ctx
// ends or WithMaxWait passes: the errors are Lock's, plus one matching
// lease.ErrPermitsMismatch. The Acquire calls of one Locker on one
// semaphore are served oldest first: the oldest Permits of them claim at
// once, and a younger one comes in as one of them leaves. The Lease
// returned is a *Lease.
func (sm *Semaphore) Acquire(ctx context.Context) (lease.Lease, error) {
	return held(sm.acquire(ctx, true))
}

// TryAcquire makes one attempt: it fails with lease.ErrNotAcquired when
// every permit is held, and also while as many Acquire calls of this
// Locker as there are permits are in line (it does not pass them).
func (sm *Semaphore) TryAcquire(ctx context.Context) (lease.Lease, error) {
	return held(sm.acquire(ctx, false))
}

// Do takes a permit like Acquire, runs fn, then releases it, with the
// guarantees of Locker.Do.
func (sm *Semaphore) Do(ctx context.Context, fn func(ctx context.Context, l lease.Lease) error) error {
	return sm.l.do(ctx, fn, func() (*Lease, error) { return sm.acquire(ctx, true) })
}

// acquire takes a permit, waiting for one or not.
func (sm *Semaphore) acquire(ctx context.Context, wait bool) (*Lease, error) {
	g := &grant{op: "acquire", name: sm.name, claims: []claim{sm.claim(wait)}}
	if wait {
		g.maxWait = sm.l.cfg.maxWait
	}
	return sm.l.granted(ctx, g)
}

// claim claims a slot. Waiting, it stands in the Locker's line for the
// semaphore, and once within its window tries, then watches the slots for
// a release and tries again, until ctx ends.
func (sm *Semaphore) claim(wait bool) claim {
	return func(ctx context.Context, s *session) (claimed, error) {
		if !wait {
			if sm.l.queues.full(sm.name) {
				return claimed{}, errFull
			}
			c, _, err := sm.attempt(ctx, s)
			return c, err
		}
		turn := sm.l.queues.join(sm.name, sm.permits)
		defer sm.l.queues.leave(sm.name, turn)
		select {
		case <-turn:
		case <-ctx.Done():
			return claimed{}, ctx.Err()
		}
		for {
			c, rev, err := sm.attempt(ctx, s)
			if !errors.Is(err, errFull) {
				return c, err
			}
			if err := sm.awaitRelease(ctx, rev); err != nil {
				return claimed{}, err
			}
		}
	}
}

// attempt makes one claim of a free slot: the slot it took, or errFull and
// the revision at which it saw every slot held (0 when the slots it saw
// free were taken before it could try them: try again at once).
func (sm *Semaphore) attempt(ctx context.Context, s *session) (claimed, int64, error) {
	var free []int // nil until read: then try every slot
	for range claimRounds {
		if !sm.known.Load() {
			if err := sm.ensure(ctx); err != nil {
				return claimed{}, 0, err
			}
		}
		cands := sm.candidates(free)
		tctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), sm.l.cfg.nodeTimeout)
		resp, err := sm.l.cli.Txn(tctx).If(clientv3.Compare(clientv3.Value(sm.countKey), "=", sm.count)).
			Then(chain(cands, s.cs.Lease(), clientv3.OpGet(sm.slots, clientv3.WithPrefix(), clientv3.WithKeysOnly()))).Commit()
		cancel()
		if err != nil {
			return claimed{}, 0, err
		}
		if !resp.Succeeded {
			sm.known.Store(false) // the stored count changed: check it again
			continue
		}
		i, seen := walk(resp, len(cands))
		if i >= 0 {
			return sm.claimed(cands[i], resp.Header.Revision), 0, nil
		}
		if free = sm.free(seen); len(free) == 0 {
			return claimed{}, resp.Header.Revision, errFull
		}
	}
	return claimed{}, 0, errFull
}

// chain builds the claim of the first free slot of keys: a transaction per
// key that puts it under the session's lease if it does not exist, and
// else runs the next one; the last else runs last.
func chain(keys []string, id clientv3.LeaseID, last clientv3.Op) clientv3.Op {
	op := last
	for i := len(keys) - 1; i >= 0; i-- {
		op = clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(keys[i]), "=", 0)},
			[]clientv3.Op{clientv3.OpPut(keys[i], "", clientv3.WithLease(id))},
			[]clientv3.Op{op})
	}
	return op
}

// walk reads a chain's answer: the index of the key it put, or -1 and the
// slot keys the last else read.
func walk(resp *clientv3.TxnResponse, n int) (int, []*mvccpb.KeyValue) {
	r := resp.Responses[0]
	for i := range n {
		t := r.GetResponseTxn()
		if t.Succeeded {
			return i, nil
		}
		r = t.Responses[0]
	}
	return -1, r.GetResponseRange().Kvs
}

// candidates returns the etcd keys of up to slotsPerTxn slots of free
// (every slot when free is nil), from a random one on, to spread the
// claims of many callers over the slots.
func (sm *Semaphore) candidates(free []int) []string {
	if free == nil {
		free = make([]int, sm.permits)
		for i := range free {
			free[i] = i
		}
	}
	start := rand.IntN(len(free))
	keys := make([]string, min(len(free), slotsPerTxn))
	for i := range keys {
		keys[i] = sm.slots + strconv.Itoa(free[(start+i)%len(free)])
	}
	return keys
}

// free returns the slots that none of held (slot keys) names.
func (sm *Semaphore) free(held []*mvccpb.KeyValue) []int {
	taken := make(map[string]bool, len(held))
	for _, kv := range held {
		taken[string(kv.Key)] = true
	}
	free := []int{}
	for i := range sm.permits {
		if !taken[sm.slots+strconv.Itoa(i)] {
			free = append(free, i)
		}
	}
	return free
}

// claimed describes the slot whose etcd key owner the claim put at rev:
// its fence is that revision, the key's create revision, or the Fencer's
// token on its Key.
func (sm *Semaphore) claimed(owner string, rev int64) claimed {
	key := owner[len(sm.l.cfg.prefix):]
	cmp := clientv3.Compare(clientv3.CreateRevision(owner), "=", rev)
	return claimed{key: key, owner: owner, cmp: &cmp, rev: rev, fenceKey: key}
}

// ensure makes the stored permit count this handle's: it stores it when
// none is, replaces another when no permit is held, and fails with an
// error matching lease.ErrPermitsMismatch when permits of another count
// are held.
func (sm *Semaphore) ensure(ctx context.Context) error {
	for range claimRounds {
		tctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), sm.l.cfg.nodeTimeout)
		resp, err := sm.l.cli.Txn(tctx).If(clientv3.Compare(clientv3.CreateRevision(sm.countKey), "=", 0)).
			Then(clientv3.OpPut(sm.countKey, sm.count)).
			Else(clientv3.OpGet(sm.countKey), clientv3.OpGet(sm.slots, clientv3.WithPrefix(), clientv3.WithCountOnly())).Commit()
		if err != nil || resp.Succeeded {
			cancel()
			sm.known.Store(err == nil)
			return err
		}
		stored := resp.Responses[0].GetResponseRange().Kvs
		switch {
		case len(stored) == 0: // deleted meanwhile: put it again
		case string(stored[0].Value) == sm.count:
			cancel()
			sm.known.Store(true)
			return nil
		case resp.Responses[1].GetResponseRange().Count > 0:
			cancel()
			return fmt.Errorf("etcdlock: semaphore %q: %w: %s permits are in use, this handle has %d", sm.name, lease.ErrPermitsMismatch, stored[0].Value, sm.permits)
		default: // none held: replace the count, if still so
			resp, err = sm.l.cli.Txn(tctx).If(
				clientv3.Compare(clientv3.ModRevision(sm.countKey), "=", stored[0].ModRevision),
				clientv3.Compare(clientv3.CreateRevision(sm.slots), "=", 0).WithPrefix()).
				Then(clientv3.OpPut(sm.countKey, sm.count)).Commit()
			if err != nil || resp.Succeeded {
				cancel()
				sm.known.Store(err == nil)
				return err
			}
		}
		cancel()
	}
	return fmt.Errorf("etcdlock: semaphore %q: %w: its stored count keeps changing", sm.name, lease.ErrPermitsMismatch)
}

// awaitRelease waits for a slot key to be deleted after revision rev (at
// once when rev is 0), or for ctx to end. A watch that etcd ended (its
// revision compacted, say) returns nil: the caller looks again.
func (sm *Semaphore) awaitRelease(ctx context.Context, rev int64) error {
	if rev == 0 {
		return ctx.Err()
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range sm.l.cli.Watch(wctx, sm.slots, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithFilterPut()) {
		if wr.Err() != nil || len(wr.Events) > 0 {
			return nil
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.New("etcdlock: the watch of the slots ended")
}
