// Package countersem is a counting semaphore over independent Redis
// masters built as the Node library redis-semaphore builds its
// RedlockSemaphore: every node keeps the semaphore's holders in a sorted
// set, admits an acquirer while the set has fewer than limit live members,
// and an acquirer holds the semaphore when a majority of the nodes
// admitted it.
//
// IT IS NOT SAFE, and it needs no fault to break: each node admits the
// first limit acquirers to reach it, and the nodes may see racing
// acquirers in different orders. With n nodes, N permits and a quorum of
// q, the nodes give at most n*N admissions in all and each holder needs q
// of them, so N+1 holders fit whenever (N+1)*q <= n*N, and up to
// floor(n*N/q) can hold at once. On 5 nodes (q = 3) that is every N >= 2:
// 3 holders of 2 permits need 9 of the 10 admissions. Only N = 1, the
// mutex, is safe there (2*3 > 5*1), which is why Redlock is a mutex.
// docs/SAFETY.md gives the measured over-admission.
//
// It is kept as the negative control of the semaphore checks and as a
// benchmark contender. quorumlock's semaphore (lease.Primitives) instead
// makes each permit a lease of its own on a permit key, with its own fence.
package countersem

import (
	"context"
	"crypto/rand"
	_ "embed" // the admission script
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/lease"
)

//go:embed admit.lua
var admitSrc string

// admitScript is run by EVALSHA (go-redis loads it on NOSCRIPT).
var admitScript = redis.NewScript(admitSrc)

// Semaphore is an UNSAFE counting semaphore over independent Redis
// masters; see the package documentation. It is safe for concurrent use.
type Semaphore struct {
	nodes  []redis.Cmdable
	name   string
	limit  int
	quorum int
	cfg    config
}

// New returns the semaphore called name (the sorted set's key on every
// node) admitting limit holders, over nodes.
func New(nodes []redis.Cmdable, name string, limit int, opts ...Option) (*Semaphore, error) {
	switch {
	case len(nodes) == 0:
		return nil, errors.New("countersem: no nodes")
	case name == "":
		return nil, errors.New("countersem: empty name")
	case limit < 1:
		return nil, fmt.Errorf("countersem: limit %d, want at least 1", limit)
	}
	cfg := defaults()
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("countersem: nil option")
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	return &Semaphore{nodes: nodes, name: name, limit: limit, quorum: len(nodes)/2 + 1, cfg: cfg}, nil
}

// Permit is an admission by a majority of the nodes.
type Permit struct {
	s     *Semaphore
	token string
	until time.Time
}

// Token returns the permit's token, its member in the nodes' sets.
func (p *Permit) Token() string { return p.token }

// Until returns the end of the permit's validity on the monotonic clock.
func (p *Permit) Until() time.Time { return p.until }

// Release removes the permit from every node. It returns an error matching
// lease.ErrUnlockUnconfirmed when fewer than a majority confirmed.
func (p *Permit) Release(ctx context.Context) error {
	all := make([]bool, len(p.s.nodes))
	for i := range all {
		all[i] = true
	}
	return p.s.release(ctx, p.token, all)
}

// TryAcquire makes one attempt: every node is asked at once, and the
// permit is held when a majority admitted it in time. A loser releases the
// nodes it won (and those whose answer it lost). It returns an error
// matching lease.ErrNotAcquired when too few nodes admitted it,
// lease.ErrQuorumUnavailable when too few answered.
func (s *Semaphore) TryAcquire(ctx context.Context) (*Permit, error) {
	token := rand.Text()
	start := time.Now()
	admitted, errs := s.admitAll(ctx, token)
	won, failed := 0, 0
	for i, err := range errs {
		if err != nil {
			failed++
			admitted[i] = true // unclear: release it too
		} else if admitted[i] {
			won++
		}
	}
	until := start.Add(s.cfg.ttl - s.cfg.ttl/100 - 2*time.Millisecond)
	if won >= s.quorum && time.Now().Before(until) {
		return &Permit{s: s, token: token, until: until}, nil
	}
	_ = s.release(context.WithoutCancel(ctx), token, admitted)
	if failed > len(s.nodes)-s.quorum {
		return nil, fmt.Errorf("countersem: %s: %d of %d nodes failed: %w", s.name, failed, len(s.nodes),
			errors.Join(append([]error{lease.ErrQuorumUnavailable}, errs...)...))
	}
	return nil, fmt.Errorf("countersem: %s: %d of %d nodes admitted, %d needed: %w", s.name, won, len(s.nodes), s.quorum, lease.ErrNotAcquired)
}

// Acquire calls TryAcquire until it succeeds, fails otherwise than with
// lease.ErrNotAcquired, or the maximum wait (WithMaxWait) or ctx ends,
// pausing WithRetryDelay between attempts.
func (s *Semaphore) Acquire(ctx context.Context) (*Permit, error) {
	deadline := time.Now().Add(s.cfg.maxWait)
	for {
		p, err := s.TryAcquire(ctx)
		if err == nil || !errors.Is(err, lease.ErrNotAcquired) || time.Now().Add(s.cfg.retryDelay).After(deadline) {
			return p, err
		}
		t := time.NewTimer(s.cfg.retryDelay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("countersem: %s: %w", s.name, ctx.Err())
		case <-t.C:
		}
	}
}
