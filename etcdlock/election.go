package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/quorumlock/quorumlock/internal/wait"
	"github.com/quorumlock/quorumlock/lease"
)

var _ lease.Election = (*Election)(nil)

// Election is one candidate in the election of a name, on etcd's recipe
// (see the package documentation). Its methods are safe for concurrent
// use.
type Election struct {
	l    *Locker
	name string
	pfx  string // the candidates' keys: prefix + name + "/"

	mu          sync.Mutex
	lead        *Lease // the leadership; nil when none
	campaigning bool
}

// Election returns a candidate in the election called name. Its
// candidacy is the etcd key prefix + name + "/" + the session's lease id
// in hex, the recipe's; the leadership's Key is that key without the
// prefix, its Token the etcd key. The key's value is the term, a colon and
// the value campaigned with (the term is 0 until the leader has taken
// office): the election is for etcdlock candidates. A name is one
// primitive's: do not use it for a lock, a semaphore or a read-write lock
// too.
func (l *Locker) Election(name string) (lease.Election, error) {
	if name == "" {
		return nil, errors.New("etcdlock: election: empty name")
	}
	return &Election{l: l, name: name, pfx: l.cfg.prefix + name + "/"}, nil
}

// Name returns the election's name.
func (e *Election) Name() string { return e.name }

// Campaign waits until this candidate leads, or ctx ends (WithMaxWait does
// not bound it), and returns the leadership. Its Fence is the term: the
// Fencer's token on the election's name with WithFencer, else the create
// revision of the candidate's key (see the package documentation for why
// either grows from leader to leader). Lost closes when the leadership
// ends: Resign, Unlock, or the session's end, which comes before etcd
// lets the next leader in. A candidate that campaigns or leads already
// fails at once.
func (e *Election) Campaign(ctx context.Context, value string) (lease.Lease, error) {
	e.mu.Lock()
	if e.campaigning || (e.lead != nil && e.lead.Err() == nil) {
		e.mu.Unlock()
		return nil, fmt.Errorf("etcdlock: campaign %q: this candidate campaigns or leads already", e.name)
	}
	e.campaigning = true
	e.mu.Unlock()
	g := &grant{op: "campaign", name: e.name, claims: []claim{e.claim(value)}, publish: e.publish(value)}
	le, err := e.l.granted(ctx, g)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.campaigning = false
	if err == nil {
		e.lead = le
	}
	return held(le, err)
}

// claim runs the recipe's campaign, holding the candidacy key's turn in
// this Locker: the key is one per session, so two candidates of one
// Locker would share it.
func (e *Election) claim(value string) claim {
	return func(ctx context.Context, s *session) (claimed, error) {
		key := fmt.Sprintf("%s/%x", e.name, s.cs.Lease())
		if !e.l.gates.enter(ctx, key, true) {
			return claimed{}, ctx.Err()
		}
		c := claimed{key: key, owner: e.l.cfg.prefix + key, gate: key, fenceKey: e.name}
		ce := concurrency.NewElection(s.cs, e.l.cfg.prefix+e.name)
		if err := e.l.campaign(ctx, ce, c, encodeLeader(0, value)); err != nil {
			return claimed{}, err
		}
		if err := e.l.stillThere(ctx, c.owner, ce.Rev()); err != nil {
			_ = e.l.release(ctx, c)
			return claimed{}, err
		}
		c.rev = ce.Rev()
		return c, nil
	}
}

// stillThere checks that key, put at rev, is still there: the recipe's
// Campaign does not, and a candidacy whose session ended while it waited
// is gone (concurrency.ErrSessionExpired: take retries on a new session).
func (l *Locker) stillThere(ctx context.Context, key string, rev int64) error {
	tctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), l.cfg.nodeTimeout)
	defer cancel()
	resp, err := l.cli.Get(tctx, key)
	switch {
	case err != nil:
		return err
	case len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != rev:
		return concurrency.ErrSessionExpired
	}
	return nil
}

// campaign runs the recipe's Campaign, which returns when ctx ends but
// withdraws its key with no deadline: that part, and a campaign won just
// as ctx ended, finish in the background, holding the key's turn until
// then. A campaign that failed withdraws its key.
func (l *Locker) campaign(ctx context.Context, ce *concurrency.Election, c claimed, val string) error {
	done := make(chan error, 1)
	l.bg(func() { done <- ce.Campaign(clientv3.WithRequireLeader(ctx), val) })
	select {
	case err := <-done:
		if err != nil {
			_ = l.release(ctx, c)
		}
		return err
	case <-ctx.Done():
	}
	l.bg(func() {
		<-done
		_ = l.release(context.Background(), c)
	})
	return ctx.Err()
}

// publish puts the term beside the value in the leader's key, once fenced,
// if the key is still the one its campaign put: this takes office.
func (e *Election) publish(value string) func(ctx context.Context, le *Lease) error {
	return func(ctx context.Context, le *Lease) error {
		h := le.owned[0]
		tctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), e.l.cfg.nodeTimeout)
		defer cancel()
		resp, err := e.l.cli.Txn(tctx).If(clientv3.Compare(clientv3.CreateRevision(h.owner), "=", h.rev)).
			Then(clientv3.OpPut(h.owner, encodeLeader(le.fences[0], value), clientv3.WithLease(le.s.cs.Lease()))).Commit()
		switch {
		case err != nil:
			return err
		case !resp.Succeeded:
			return fmt.Errorf("%w: the candidate's key went before it took office", lease.ErrLeaseLost)
		}
		return nil
	}
}

// Resign ends this candidate's leadership (its Lease is released: Lost
// closes, then the key is deleted): an error matching lease.ErrNotLeader
// when it does not lead, Unlock's errors otherwise.
func (e *Election) Resign(ctx context.Context) error {
	e.mu.Lock()
	le := e.lead
	e.lead = nil
	e.mu.Unlock()
	if le == nil || le.Err() != nil {
		return fmt.Errorf("etcdlock: resign %q: %w", e.name, lease.ErrNotLeader)
	}
	if err := le.Unlock(ctx); err != nil {
		if errors.Is(err, lease.ErrLeaseLost) {
			return fmt.Errorf("etcdlock: resign %q: %w: %w", e.name, lease.ErrNotLeader, err)
		}
		return fmt.Errorf("etcdlock: resign %q: %w", e.name, err)
	}
	return nil
}

// Leader returns the leader in office, read within the node timeout:
// lease.ErrNoLeader when there is none (or its candidate is still taking
// office), lease.ErrQuorumUnavailable when etcd does not answer.
func (e *Election) Leader(ctx context.Context) (lease.Leader, error) {
	ld, _, err := e.leader(ctx)
	return ld, err
}

// leader reads the leader, and the revision at which it was read.
func (e *Election) leader(ctx context.Context) (lease.Leader, int64, error) {
	tctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), e.l.cfg.nodeTimeout)
	defer cancel()
	resp, err := e.l.cli.Get(tctx, e.pfx, clientv3.WithFirstCreate()...)
	if err != nil {
		return lease.Leader{}, 0, fmt.Errorf("etcdlock: leader of %q: %w: %w", e.name, lease.ErrQuorumUnavailable, err)
	}
	if len(resp.Kvs) == 0 {
		return lease.Leader{}, resp.Header.Revision, fmt.Errorf("etcdlock: leader of %q: %w", e.name, lease.ErrNoLeader)
	}
	ld, ok := decodeLeader(resp.Kvs[0].Value)
	if !ok {
		return lease.Leader{}, resp.Header.Revision, fmt.Errorf("etcdlock: leader of %q: %w: its candidate is taking office", e.name, lease.ErrNoLeader)
	}
	return ld, resp.Header.Revision, nil
}

// Observe delivers the leaders in office, each once, in increasing term
// order (a leader whose term is not above the last delivered is skipped),
// until ctx ends or the Locker closes; then the channel is closed. A
// receiver that lags sees the latest leader, not every one.
func (e *Election) Observe(ctx context.Context) <-chan lease.Leader {
	ch := make(chan lease.Leader)
	octx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(e.l.ctx, cancel)
	go func() {
		defer close(ch)
		defer cancel()
		defer stop()
		e.observe(octx, ch)
	}()
	return ch
}

// observe reads the leader, sends it when its term is new, and waits for
// a change under the election's keys, until ctx ends.
func (e *Election) observe(ctx context.Context, ch chan<- lease.Leader) {
	var last int64
	for ctx.Err() == nil {
		ld, rev, err := e.leader(ctx)
		if err != nil && !errors.Is(err, lease.ErrNoLeader) {
			_ = wait.Sleep(ctx, e.l.cfg.nodeTimeout) // etcd is out of reach: ask again
			continue
		}
		if err == nil && ld.Term > last {
			select {
			case ch <- ld:
				last = ld.Term
			case <-ctx.Done():
				return
			}
		}
		e.awaitChange(ctx, rev)
	}
}

// awaitChange waits for a change under the election's keys after revision
// rev, for its watch to end, or for ctx to end.
func (e *Election) awaitChange(ctx context.Context, rev int64) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range e.l.cli.Watch(wctx, e.pfx, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if wr.Err() != nil || len(wr.Events) > 0 {
			return
		}
	}
}

// encodeLeader is the value of a candidate's key: its term (0 until it
// takes office), a colon, and its value.
func encodeLeader(term int64, value string) string {
	return strconv.FormatInt(term, 10) + ":" + value
}

// decodeLeader reads a leader key's value; false for a candidate that has
// not taken office, or a value etcdlock did not write.
func decodeLeader(v []byte) (lease.Leader, bool) {
	t, value, ok := strings.Cut(string(v), ":")
	term, err := strconv.ParseInt(t, 10, 64)
	if !ok || err != nil || term <= 0 {
		return lease.Leader{}, false
	}
	return lease.Leader{Value: value, Term: term}, true
}
