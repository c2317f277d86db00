package quorum

import (
	"cmp"
	"context"
	_ "embed" // the leader script
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/lease"
)

// The keys an election publishes beside its lock key, and its history's bounds.
const (
	leaderSuffix  = ":leader"  // the leader: "<term>:<value>", with the lease's TTL
	historySuffix = ":leaders" // the last leaders, oldest first
	historyLen    = 64         // entries the history keeps
	historyTTLs   = 10         // the history lives this many TTLs past the last publication
)

var (
	//go:embed scripts/leader.lua
	leaderSrc    string
	leaderScript = redis.NewScript(leaderSrc)

	// errGreaterTerm is the error of a node that refused a publication.
	errGreaterTerm = errors.New("quorum: the node holds a greater term")
)

var (
	_ lease.Election = (*Election)(nil)
	_ lease.Lease    = (*leadership)(nil)
)

// Election is one candidate in the election called name (Locker.Election).
//
// The leadership is a lease on the key name, taken as Lock takes one, and
// the term is its fence (from the Locker's Fencer): every leader's term is
// greater than every earlier one's. While it leads, the Election extends
// the lease in the background and publishes the leader on every node: the
// key name+":leader" holds "<term>:<value>" with the lease's TTL, and the
// list name+":leaders" the last 64 leaders (it expires 10 TTLs after the
// last publication); Leader and Observe read them. The lease is the
// leadership, and the publication only reports it: a resource that must
// not follow a deposed leader checks the term, as a fence.
//
// Safe for concurrent use. One handle is one candidate: it campaigns, then
// resigns (or loses), then may campaign again.
type Election struct {
	l    *Locker
	name string
	keys []string // the leader key and the history: the script's KEYS

	mu          sync.Mutex
	cur         *leadership // the last leadership won, until resigned
	campaigning bool
}

// Election returns a handle on the election called name: one candidate,
// whose dynamic type is *Election. The Locker must have a Fencer
// (WithFencer), else the error matches lease.ErrNoFencer: the terms must
// grow across every leader, and Redis masters keep no counter that can
// promise it (a master that restarts empty forgets it, and masters that
// disagree give a majority no one greatest value), while the Fencer's store
// (fencing.Issuer: a Postgres row) is one durable sequence.
func (l *Locker) Election(name string) (lease.Election, error) {
	if name == "" {
		return nil, errors.New("quorum: election: empty name")
	}
	if _, err := newTarget([]string{name}); err != nil {
		return nil, fmt.Errorf("quorum: election %q: %w", name, err)
	}
	if l.cfg.fencer == nil {
		return nil, fmt.Errorf("quorum: election %q: %w: the term is the lease's fence (WithFencer)", name, lease.ErrNoFencer)
	}
	return &Election{l: l, name: name, keys: []string{name + leaderSuffix, name + historySuffix}}, nil
}

// Name returns the election's name: the key its leader holds.
func (e *Election) Name() string { return e.name }

// Campaign waits until this candidate leads, ctx ends, or the Locker is
// closed, and returns the leadership: a lease on the key name, whose Fence
// is the term. It takes the lease as Lock does but with no limit other than
// ctx (one Locker's candidates are served oldest first), then publishes
// value: unless a majority confirms the publication within the validity,
// it releases the lease and fails with lease.ErrQuorumUnavailable.
//
// While it leads, a watchdog extends the lease every watchdog interval
// (WithWatchdogInterval) and then rewrites the publication, until Resign or
// the loss of the lease. Lost is closed when the leadership ends: at Until
// at the latest, which comes before the key expires on the nodes, so a
// leader learns of its loss before another can be elected (unless nodes
// forget the key: the term still fences the deposed leader). The lease's
// Unlock resigns, as Resign does; its Extend rewrites the publication too.
// A handle that campaigns or leads cannot campaign again until it resigns.
func (e *Election) Campaign(ctx context.Context, value string) (lease.Lease, error) {
	if err := e.enter(ctx); err != nil {
		return nil, err
	}
	ld, err := e.win(ctx, value)
	e.mu.Lock()
	e.campaigning = false
	if err == nil {
		e.cur = ld
	}
	e.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return ld, nil
}

// enter marks the handle campaigning, and releases a leadership it lost.
func (e *Election) enter(ctx context.Context) error {
	e.mu.Lock()
	old := e.cur
	busy := e.campaigning || (old != nil && old.Err() == nil)
	if !busy {
		e.campaigning, e.cur = true, nil
	}
	e.mu.Unlock()
	if busy {
		return fmt.Errorf("quorum: campaign %q: this candidate already campaigns or leads", e.name)
	}
	if old != nil {
		_ = old.finish(ctx) // lost: only what may be left of it on the nodes
	}
	return nil
}

// win takes the lease, starts its watchdog and publishes value.
func (e *Election) win(ctx context.Context, value string) (*leadership, error) {
	l := e.l
	le, err := l.lock(ctx, []string{e.name}, 0, 0)
	switch {
	case err != nil && l.closed.Load() && !errors.Is(err, lease.ErrClosed):
		return nil, fmt.Errorf("quorum: campaign %q: %w: %w", e.name, lease.ErrClosed, err)
	case err != nil:
		return nil, fmt.Errorf("quorum: campaign %q: %w", e.name, err)
	}
	ld := &leadership{Lease: le, e: e, value: value, stop: make(chan struct{}), done: make(chan struct{})}
	go ld.keep(context.WithoutCancel(ctx))
	if err := e.publish(ctx, ld.Fence(), value, l.cfg.ttl, le.Until()); err != nil {
		_ = ld.finish(ctx) // the publication's error is the one that matters
		return nil, fmt.Errorf("quorum: campaign %q: %w", e.name, err)
	}
	return ld, nil
}

// Resign ends this candidate's leadership: it stops the watchdog, deletes
// the publication where it still names this term, and releases the lease
// (Lease.Unlock: the oldest candidate of this Locker waiting takes over at
// once). The error matches lease.ErrNotLeader when this handle does not
// lead: it never won, it resigned already, or its lease was lost (then the
// error matches the loss's lease.ErrLeaseLost too). Otherwise it is
// Unlock's. It takes up to two node timeouts.
func (e *Election) Resign(ctx context.Context) error {
	e.mu.Lock()
	ld := e.cur
	e.cur = nil
	e.mu.Unlock()
	if ld == nil {
		return fmt.Errorf("quorum: resign %q: %w", e.name, lease.ErrNotLeader)
	}
	lost := ld.Err()
	err := ld.finish(ctx)
	if lost != nil {
		return fmt.Errorf("quorum: resign %q: %w: %w", e.name, lease.ErrNotLeader, lost)
	}
	return err
}

// Leader returns the published leader of greatest term among the answers
// of every node, read at once within the node timeout. The error matches
// lease.ErrQuorumUnavailable when less than a majority answered, and
// lease.ErrNoLeader when no answer names a leader. A leader deposed by a
// loss (not a resignation) may be returned until its publication expires,
// one TTL at most: the term, a fence, is what makes it harmless.
func (e *Election) Leader(ctx context.Context) (lease.Leader, error) {
	vals := make([]string, len(e.l.nodes))
	errs := e.fanOut(ctx, time.Time{}, func(ctx context.Context, i int, c redis.UniversalClient) error {
		v, err := c.Get(ctx, e.keys[0]).Result()
		if errors.Is(err, redis.Nil) {
			return nil
		}
		vals[i] = v
		return err
	})
	if err := e.enough(ctx, "leader", errs); err != nil {
		return lease.Leader{}, err
	}
	var best lease.Leader
	found := false
	for i, v := range vals {
		if ld, ok := parseLeader(v); ok && errs[i] == nil && (!found || ld.Term > best.Term) {
			best, found = ld, true
		}
	}
	if !found {
		return lease.Leader{}, fmt.Errorf("quorum: election %q: %w", e.name, lease.ErrNoLeader)
	}
	return best, nil
}

// Observe delivers the current leader, if any, then every later one, in
// increasing term order, until ctx ends or the Locker is closed; then the
// channel is closed. Its goroutine reads every node's publication and
// history every TTL/4, and once a majority answered it delivers each term
// found in any answer. Two majorities share a node, so every leader whose
// publication a majority confirmed is delivered, even one that came and
// went between two reads (unless more than 64 did, or the nodes forgot
// them). A candidate whose publication reached less than a majority (it
// then resigned at once) may be delivered too: it held the lease, briefly.
// Each delivery waits for the reader.
func (e *Election) Observe(ctx context.Context) <-chan lease.Leader {
	ch := make(chan lease.Leader)
	go e.observe(ctx, ch)
	return ch
}

func (e *Election) observe(ctx context.Context, ch chan<- lease.Leader) {
	defer close(ch)
	tick := time.NewTicker(max(e.l.cfg.ttl/4, time.Millisecond))
	defer tick.Stop()
	var last int64 // the last term delivered, or known when the first view came
	started := false
	for {
		v, err := e.poll(ctx)
		switch {
		case errors.Is(err, lease.ErrClosed):
			return
		case err == nil && !started:
			last, started = v.from(), true
		}
		if err == nil {
			for _, ld := range v.after(last) {
				select {
				case ch <- ld:
					last = ld.Term
				case <-ctx.Done():
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// view is what one poll read from the nodes that answered.
type view struct {
	seen       map[int64]string // every leader found, term to value
	current    int64            // the greatest term among the leader keys
	hasCurrent bool             // some leader key was found
}

// from is the term after which a new observer delivers: just below the
// current leader's, so that it comes first; else the last one known.
func (v view) from() int64 {
	if v.hasCurrent {
		return v.current - 1
	}
	var last int64
	for t := range v.seen {
		last = max(last, t)
	}
	return last
}

// after returns the leaders of terms above last, in increasing term order.
func (v view) after(last int64) []lease.Leader {
	var out []lease.Leader
	for t, val := range v.seen {
		if t > last {
			out = append(out, lease.Leader{Value: val, Term: t})
		}
	}
	slices.SortFunc(out, func(a, b lease.Leader) int { return cmp.Compare(a.Term, b.Term) })
	return out
}

// poll reads every node's publication and history at once, within the node
// timeout: an error unless a majority answered.
func (e *Election) poll(ctx context.Context) (view, error) {
	n := len(e.l.nodes)
	hist, cur := make([][]string, n), make([]string, n)
	errs := e.fanOut(ctx, time.Time{}, func(ctx context.Context, i int, c redis.UniversalClient) error {
		var lr *redis.StringSliceCmd
		var g *redis.StringCmd
		_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
			lr, g = p.LRange(ctx, e.keys[1], 0, -1), p.Get(ctx, e.keys[0])
			return nil
		})
		if err := lr.Err(); err != nil {
			return err
		}
		if err := g.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		hist[i], cur[i] = lr.Val(), g.Val()
		return nil
	})
	if err := e.enough(ctx, "observe", errs); err != nil {
		return view{}, err
	}
	v := view{seen: map[int64]string{}}
	for i := range n {
		for _, s := range hist[i] {
			if ld, ok := parseLeader(s); ok {
				v.seen[ld.Term] = ld.Value
			}
		}
		if ld, ok := parseLeader(cur[i]); ok {
			v.seen[ld.Term] = ld.Value
			if !v.hasCurrent || ld.Term > v.current {
				v.current, v.hasCurrent = ld.Term, true
			}
		}
	}
	return v, nil
}

// parseLeader reads a published "<term>:<value>".
func parseLeader(s string) (lease.Leader, bool) {
	t, v, ok := strings.Cut(s, ":")
	if !ok {
		return lease.Leader{}, false
	}
	term, err := strconv.ParseInt(t, 10, 64)
	return lease.Leader{Value: v, Term: term}, err == nil
}

// publish sets the leader "<term>:<value>" with ttl on every node and
// appends it to the history, within the node timeout and before until: an
// error unless a majority confirmed.
func (e *Election) publish(ctx context.Context, term int64, value string, ttl time.Duration, until time.Time) error {
	entry := strconv.FormatInt(term, 10) + ":" + value
	hist := (historyTTLs * ttl).Milliseconds()
	errs := e.fanOut(ctx, until, func(ctx context.Context, _ int, c redis.UniversalClient) error {
		v, err := leaderScript.Run(ctx, c, e.keys, "publish", term, entry, ttl.Milliseconds(), historyLen, hist).Int64()
		if err == nil && v == 0 {
			return errGreaterTerm
		}
		return err
	})
	return e.enough(ctx, "publish term "+strconv.FormatInt(term, 10), errs)
}

// retract deletes the publication on every node where it names term.
func (e *Election) retract(ctx context.Context, term int64) error {
	errs := e.fanOut(ctx, time.Time{}, func(ctx context.Context, _ int, c redis.UniversalClient) error {
		return leaderScript.Run(ctx, c, e.keys, "retract", term).Err()
	})
	return e.enough(ctx, "retract", errs)
}

// fanOut runs op on every node at once, each bounded by ctx, the node
// timeout and deadline (zero: none), and returns each node's error.
func (e *Election) fanOut(ctx context.Context, deadline time.Time, op func(ctx context.Context, i int, c redis.UniversalClient) error) []error {
	errs := make([]error, len(e.l.nodes))
	if e.l.closed.Load() {
		for i := range errs {
			errs[i] = lease.ErrClosed
		}
		return errs
	}
	d := time.Now().Add(e.l.cfg.nodeTimeout)
	if !deadline.IsZero() {
		d = earlier(d, deadline)
	}
	nctx, cancel := context.WithDeadline(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	for i, n := range e.l.nodes {
		wg.Go(func() {
			err := op(nctx, i, n.client)
			if err != nil && ctxErr(ctx) == nil && ctxErr(nctx) != nil {
				err = fmt.Errorf("%w (%v)", ErrNodeTimeout, err)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	return errs
}

// enough returns nil when a majority of errs are nil, else an error naming
// each failed node that matches lease.ErrClosed, ctx's error, or else
// lease.ErrQuorumUnavailable.
func (e *Election) enough(ctx context.Context, what string, errs []error) error {
	var failed []error
	for i, err := range errs {
		if err != nil {
			failed = append(failed, e.l.nodeError(i, err))
		}
	}
	if ok := len(errs) - len(failed); ok < e.l.quorum {
		cause := lease.ErrQuorumUnavailable
		if e.l.closed.Load() {
			cause = lease.ErrClosed
		} else if err := ctxErr(ctx); err != nil {
			cause = err
		}
		return fmt.Errorf("quorum: election %q: %s: %d of %d nodes answered, %d needed: %w: %w",
			e.name, what, ok, len(errs), e.l.quorum, cause, errors.Join(failed...))
	}
	return nil
}

// leadership is a won election: the lease, which a watchdog keeps alive and
// published, and whose Unlock resigns.
type leadership struct {
	*Lease
	e     *Election
	value string
	stop  chan struct{} // closed to stop the watchdog
	done  chan struct{} // closed when the watchdog returned
	once  sync.Once     // closes stop
}

// Extend extends the lease (Lease.Extend), then rewrites the publication
// with ttl: best effort, as the lease, not its publication, is the leadership.
func (ld *leadership) Extend(ctx context.Context, ttl time.Duration) error {
	if err := ld.Lease.Extend(ctx, ttl); err != nil {
		return err
	}
	_ = ld.e.publish(ctx, ld.Fence(), ld.value, ttl.Truncate(time.Millisecond), ld.Until())
	return nil
}

// Unlock resigns: see Election.Resign (the error is Lease.Unlock's).
func (ld *leadership) Unlock(ctx context.Context) error {
	ld.e.mu.Lock()
	if ld.e.cur == ld {
		ld.e.cur = nil
	}
	ld.e.mu.Unlock()
	return ld.finish(ctx)
}

// finish stops the watchdog, retracts the publication where it still names
// this term (even when ctx has ended), and releases the lease.
func (ld *leadership) finish(ctx context.Context) error {
	ld.once.Do(func() { close(ld.stop) })
	<-ld.done
	_ = ld.e.retract(context.WithoutCancel(ctx), ld.Fence())
	return ld.Lease.Unlock(ctx)
}

// keep extends the lease every watchdog interval (sooner again after an
// unclear extension) until it is stopped, the lease ends or the Locker closes.
func (ld *leadership) keep(ctx context.Context) {
	defer close(ld.done)
	cfg := &ld.e.l.cfg
	next := time.NewTimer(cfg.watchdog)
	defer next.Stop()
	for {
		select {
		case <-ld.stop:
			return
		case <-ld.Lost():
			return
		case <-ld.e.l.stop:
			return
		case <-next.C:
		}
		delay := cfg.watchdog
		if err := ld.Extend(ctx, cfg.ttl); errors.Is(err, lease.ErrExtendUnconfirmed) {
			delay = max(cfg.nodeTimeout/2, time.Millisecond)
		}
		next.Reset(delay)
	}
}
