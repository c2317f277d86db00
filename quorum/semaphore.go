package quorum

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/lease"
)

// MaxPermits is the most permits a semaphore may have.
const MaxPermits = 1024

// PermitKey returns the key of permit i (0-based) of the semaphore name.
func PermitKey(name string, i int) string { return name + ":permit:" + strconv.Itoa(i) }

// PermitCountKey returns the key on every node that records the permit
// count of the semaphore name. It has no TTL: the count is fixed for the
// name until an operator deletes it on every node, once no permit is held
// (quorumctl semaphore NAME shows the count and the holders).
func PermitCountKey(name string) string { return name + ":permits" }

// Semaphore admits at most Permits holders at once. Permit i is a lease on
// the key PermitKey(name, i), voted on like a lock: two holders of one
// permit exclude each other as two holders of a lock do, so no more than
// Permits hold at once, under the Locker's assumptions and with its fault
// tolerance. Each permit has its own fence (FenceOf its key).
//
// It is not a counter on each node with a majority of admissions: nodes
// reached in different orders admit different sets of acquirers, and more
// than Permits of them can each collect a majority (with n nodes, N
// permits and a majority q, N+1 holders fit whenever (N+1)q <= nN, which
// holds for every N >= 2 on five nodes). Here a node votes for one holder
// per permit key, so a permit has at most one majority.
//
// An attempt takes one permit at random on an Acquire's first try (one
// round when a permit is free), else asks the nodes which are free (one
// round writing nothing) and tries those, at most two. A waiter is woken by
// a release of any permit; the waiters of one Locker go oldest first.
type Semaphore struct {
	l     *Locker
	name  string
	slots []target // permit i's one-key target
	all   target   // every permit's key: what a waiter waits for
	peekK []any    // the peek's keys: every permit's, then block's if any
	block bool     // the last peek key stops acquisitions while a majority has it
	count string   // PermitCountKey(name)
	ok    atomic.Bool
}

var _ lease.Semaphore = (*Semaphore)(nil)

// Semaphore returns the semaphore name with permits permits (1 to
// MaxPermits). The count is recorded on the nodes by the first acquisition;
// an acquisition through a handle that names another count fails with an
// error matching lease.ErrPermitsMismatch. The dynamic type is *Semaphore.
func (l *Locker) Semaphore(name string, permits int) (lease.Semaphore, error) {
	s, err := l.semaphore(name, permits, fenceAll, "")
	if err != nil {
		return nil, err
	}
	return s, nil
}

// semaphore builds a semaphore whose permits get fences by fence, and that
// no one acquires while block ("": none) is on a majority of the nodes.
func (l *Locker) semaphore(name string, permits int, fence fencePolicy, block string) (*Semaphore, error) {
	switch {
	case name == "":
		return nil, errors.New("quorum: semaphore: empty name")
	case permits < 1 || permits > MaxPermits:
		return nil, fmt.Errorf("quorum: semaphore %q: %d permits: want 1 to %d", name, permits, MaxPermits)
	}
	s := &Semaphore{l: l, name: name, count: PermitCountKey(name), block: block != ""}
	keys := make([]string, permits)
	for i := range keys {
		keys[i] = PermitKey(name, i)
		tg, err := newTarget(keys[i : i+1])
		if err != nil {
			return nil, err
		}
		tg.fence = fence
		s.slots = append(s.slots, tg)
		s.peekK = append(s.peekK, keys[i])
	}
	if block != "" {
		s.peekK = append(s.peekK, block)
	}
	s.all = target{name: name, keys: keys}
	return s, nil
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Permits returns the number of permits.
func (s *Semaphore) Permits() int { return len(s.slots) }

// Acquire takes a permit, waiting as Lock does while every permit is held.
// The Lease returned is a *Lease on the permit's key.
func (s *Semaphore) Acquire(ctx context.Context) (lease.Lease, error) {
	return held(s.acquire(ctx, s.l.cfg.retry.Attempts, s.l.cfg.maxWait))
}

// TryAcquire makes one attempt: lease.ErrNotAcquired when every permit is held.
func (s *Semaphore) TryAcquire(ctx context.Context) (lease.Lease, error) {
	return held(s.acquire(ctx, 1, 0))
}

// Do takes a permit like Acquire and runs fn while it is kept alive, with
// the guarantees of Locker.Do.
func (s *Semaphore) Do(ctx context.Context, fn func(ctx context.Context, l lease.Lease) error) error {
	if fn == nil {
		return fmt.Errorf("quorum: semaphore %q: Do: fn is nil", s.name)
	}
	le, err := s.acquire(ctx, s.l.cfg.retry.Attempts, s.l.cfg.maxWait)
	if err != nil {
		return err
	}
	return s.l.run(ctx, le, fn)
}

func (s *Semaphore) acquire(ctx context.Context, attempts int, maxWait time.Duration) (*Lease, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	return s.l.acquire(ctx, &acquirer{l: s.l, tg: s.all, attempts: attempts, pick: s.pick}, maxWait)
}

// pick makes one attempt: on an Acquire's first try, a permit at random;
// then, or later, the permits a look at the nodes finds free.
func (s *Semaphore) pick(ctx context.Context, contended bool) (*Lease, bool, error) {
	from := mrand.IntN(len(s.slots))
	if !contended && !s.block {
		le, retryable, err := s.l.attempt(ctx, s.slots[from], false)
		if err == nil || !errors.Is(err, lease.ErrNotAcquired) {
			return le, retryable, err
		}
	}
	free, err := s.peek(ctx, from)
	for _, i := range free {
		var le *Lease
		var retryable bool
		if le, retryable, err = s.l.attempt(ctx, s.slots[i], contended); err == nil || !errors.Is(err, lease.ErrNotAcquired) {
			return le, retryable, err
		}
	}
	return nil, true, err
}

// peek asks every node for its first free permit from index from on, and
// returns up to two permits found free, those most nodes named first; or
// an error matching lease.ErrNotAcquired when a majority of the answers
// found none free (or the blocking key), lease.ErrQuorumUnavailable when
// no majority answered.
func (s *Semaphore) peek(ctx context.Context, from int) ([]int, error) {
	l := s.l
	c := l.send(ctx, request{op: OpRead, script: peekScript, key: s.name, keys: s.all.keys,
		args: peekScript.evalsha(s.peekK, from, len(s.slots)), deadline: time.Now().Add(l.cfg.nodeTimeout)})
	got, t := l.gather(c)
	if t.ok = len(got); t.ok < l.quorum {
		return nil, l.quorumError(OpRead, s.name, t, "no majority answered the look for a free permit", lease.ErrQuorumUnavailable)
	}
	votes := make(map[int]int)
	blocked := 0
	for _, r := range got {
		switch {
		case r.val > 0 && int(r.val) <= len(s.slots):
			votes[int(r.val)-1]++
		case r.val == -1:
			blocked++
		}
	}
	if blocked*2 > len(got) {
		return nil, fmt.Errorf("quorum: %q: a writer waits: %w", s.name, lease.ErrNotAcquired)
	}
	free := make([]int, 0, len(votes))
	for i := range votes {
		free = append(free, i)
	}
	if len(free) == 0 {
		return nil, fmt.Errorf("quorum: semaphore %q: every permit is held: %w", s.name, lease.ErrNotAcquired)
	}
	slices.SortFunc(free, func(a, b int) int { return votes[b] - votes[a] })
	return free[:min(2, len(free))], nil
}

// check makes sure, once per handle, that a majority of the nodes record
// this handle's permit count for the name (the first records it).
func (s *Semaphore) check(ctx context.Context) error {
	if s.ok.Load() {
		return nil
	}
	l := s.l
	if l.closed.Load() {
		return fmt.Errorf("quorum: semaphore %q: %w", s.name, lease.ErrClosed)
	}
	c := l.send(ctx, request{op: OpRead, script: permitsScript, key: s.count, keys: []string{s.count},
		args: permitsScript.evalsha([]any{s.count}, len(s.slots)), deadline: time.Now().Add(l.cfg.nodeTimeout)})
	got, t := l.gather(c)
	for _, r := range got {
		if int(r.val) != len(s.slots) {
			return fmt.Errorf("quorum: semaphore %q: %d permits, but node %d (%s) records %d: %w",
				s.name, len(s.slots), r.node, l.nodes[r.node].addr, r.val, lease.ErrPermitsMismatch)
		}
	}
	if t.ok = len(got); t.ok < l.quorum {
		return l.quorumError(OpRead, s.count, t, "no majority confirmed the permit count", lease.ErrQuorumUnavailable)
	}
	s.ok.Store(true)
	return nil
}

// gather reads c's answers until a majority of the nodes answered or none
// is left: the answers, and a tally of the nodes that failed.
func (l *Locker) gather(c *call) ([]nodeResult, tally) {
	t := newTally(len(l.nodes))
	var got []nodeResult
	for len(got) < l.quorum && len(got)+t.failed < c.n {
		r, ok := c.next()
		if !ok {
			err := c.lateError(false)
			for i := range c.n {
				if n := c.target(i); !c.answered(n) {
					t.failed++
					t.errs = append(t.errs, l.nodeError(n, err))
				}
			}
			break
		}
		if r.err != nil {
			t.failed++
			t.errs = append(t.errs, l.nodeError(r.node, r.err))
			continue
		}
		got = append(got, r)
	}
	return got, t
}
