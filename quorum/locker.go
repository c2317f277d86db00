package quorum

import (
	"context"
	"crypto/rand"
	_ "embed" // the Lua scripts
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// BootMarkerKey is the key of the amnesia marker on every node (see
// WithAmnesiaGuard). It holds the node's own TIME, in milliseconds, from the
// moment a client first found the node without a marker. It must never be
// given a TTL or be evicted. An operator who knows a brand-new node has never
// held a lock may skip its warm-up with `SET quorumlock:boot 0`.
const BootMarkerKey = "quorumlock:boot"

var (
	//go:embed scripts/acquire.lua
	acquireSrc string
	//go:embed scripts/release.lua
	releaseSrc string
	//go:embed scripts/extend.lua
	extendSrc string
)

// Locker acquires leases on keys by majority vote over independent Redis
// masters (Redlock). It is safe for concurrent use. Create it with New.
type Locker struct {
	nodes  []node
	quorum int
	cfg    config

	acquireScript, releaseScript, extendScript *redis.Script

	ttlArg, windowArg any // milliseconds, boxed once
}

type node struct {
	client redis.UniversalClient
	addr   string
}

// New returns a Locker over nodes, which must be independent Redis masters
// (not replicas of one another, and not the same server twice). Use an odd
// number: 2f+1 nodes keep working with f nodes down. Each client should have
// ContextTimeoutEnabled so that a node request ends at the node timeout; the
// Locker never waits past the node timeout itself, but a request the client
// does not cut off keeps its goroutine until the client's own timeout.
//
// New rejects an empty node list, a nil client, the same client or the same
// address given twice, and invalid options, with an error naming each
// problem.
func New(nodes []redis.UniversalClient, opts ...Option) (*Locker, error) {
	if len(nodes) == 0 {
		return nil, errors.New("quorum: New: no nodes given")
	}
	cfg := defaultConfig()
	var errs []error
	for i, o := range opts {
		if o == nil {
			errs = append(errs, fmt.Errorf("option %d is nil", i))
			continue
		}
		o(&cfg)
	}
	l := &Locker{nodes: make([]node, len(nodes)), quorum: majority(len(nodes))}
	for i, c := range nodes {
		if isNilClient(c) {
			errs = append(errs, fmt.Errorf("nodes[%d] is nil", i))
			continue
		}
		for j := range i {
			if nodes[j] == c {
				errs = append(errs, fmt.Errorf("nodes[%d] is the same client as nodes[%d]: each node must be a distinct master", i, j))
			}
		}
		addr := addrOf(c)
		for j := range i {
			if addr != "" && l.nodes[j].addr == addr && nodes[j] != c {
				errs = append(errs, fmt.Errorf("nodes[%d] and nodes[%d] both address %s: each node must be a distinct master", i, j, addr))
			}
		}
		if cfg.guard {
			switch c.(type) {
			case *redis.ClusterClient, *redis.Ring:
				errs = append(errs, fmt.Errorf("nodes[%d] is a %T: with the amnesia guard each node must be one master (a *redis.Client)", i, c))
			}
		}
		l.nodes[i] = node{client: c, addr: addr}
	}
	if err := cfg.resolve(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("quorum: New: %w", errors.Join(errs...))
	}
	l.cfg = cfg
	l.acquireScript = redis.NewScript(acquireSrc)
	l.releaseScript = redis.NewScript(releaseSrc)
	l.extendScript = redis.NewScript(extendSrc)
	l.ttlArg = cfg.ttl.Milliseconds()
	l.windowArg = cfg.window.Milliseconds()
	return l, nil
}

func isNilClient(c redis.UniversalClient) bool {
	switch c := c.(type) {
	case nil:
		return true
	case *redis.Client:
		return c == nil
	case *redis.ClusterClient:
		return c == nil
	case *redis.Ring:
		return c == nil
	}
	return false
}

func addrOf(c redis.UniversalClient) string {
	if c, ok := c.(*redis.Client); ok {
		return c.Options().Addr
	}
	return ""
}

// TTL returns the lease TTL of the Locker.
func (l *Locker) TTL() time.Duration { return l.cfg.ttl }

// Lock acquires key, retrying with a jittered exponential backoff until it
// succeeds, ctx ends, or the retry budget (WithRetry, WithMaxWait) is spent.
// On failure the error matches ErrNotAcquired or ErrQuorumUnavailable (and
// is or wraps a *QuorumError), or wraps ctx.Err() when ctx ended, or wraps
// the Fencer's error.
func (l *Locker) Lock(ctx context.Context, key string) (*Lease, error) {
	return l.lock(ctx, key, l.cfg.retry.Attempts, l.cfg.maxWait, nil)
}

// TryLock makes exactly one attempt to acquire key.
// It fails with ErrNotAcquired when another owner holds the key.
func (l *Locker) TryLock(ctx context.Context, key string) (*Lease, error) {
	return l.lock(ctx, key, 1, 0, nil)
}

func (l *Locker) checkKey(key string) error {
	switch key {
	case "":
		return errors.New("quorum: empty key")
	case BootMarkerKey:
		return fmt.Errorf("quorum: key %q is reserved for the amnesia marker", key)
	}
	return nil
}

// lock runs up to attempts attempts (0: no count limit) within maxWait (0:
// no time limit). Goroutines it starts are counted in wg when wg is not nil.
func (l *Locker) lock(ctx context.Context, key string, attempts int, maxWait time.Duration, wg *sync.WaitGroup) (*Lease, error) {
	if err := l.checkKey(key); err != nil {
		return nil, err
	}
	start := time.Now()
	var deadline time.Time
	if maxWait > 0 {
		deadline = start.Add(maxWait)
	}
	var (
		lastErr  error
		n        int
		canceled bool
	)
	for {
		if ctx.Err() != nil {
			lastErr, canceled = ctxError(ctx, "lock", key), true
			break
		}
		n++
		lease, err, retryable := l.attempt(ctx, key, wg)
		if err == nil {
			l.cfg.observer.ObserveAcquire(AcquireEvent{Key: key, Attempts: n, Duration: time.Since(start), Result: ResultAcquired})
			return lease, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			lastErr, canceled = ctxError(ctx, "lock", key), true
			break
		}
		if !retryable || (attempts > 0 && n >= attempts) {
			break
		}
		d := backoffDelay(n-1, l.cfg.retry.BaseDelay, l.cfg.retry.MaxDelay, mrand.Int64N)
		if !deadline.IsZero() && time.Now().Add(d).After(deadline) {
			break
		}
		if !sleep(ctx, d) {
			lastErr, canceled = ctxError(ctx, "lock", key), true
			break
		}
	}
	if n > 1 && !canceled {
		lastErr = fmt.Errorf("quorum: lock %q: gave up after %d attempts in %v: %w", key, n, time.Since(start).Round(time.Millisecond), lastErr)
	}
	l.cfg.observer.ObserveAcquire(AcquireEvent{Key: key, Attempts: n, Duration: time.Since(start), Result: resultOf(lastErr), Err: lastErr})
	return nil, lastErr
}

func resultOf(err error) Result {
	switch {
	case err == nil:
		return ResultAcquired
	case errors.Is(err, ErrNotAcquired):
		return ResultNotAcquired
	case errors.Is(err, ErrQuorumUnavailable):
		return ResultUnavailable
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return ResultCanceled
	}
	return ResultError
}

// ctxError wraps the context's error (and its cause when it differs).
func ctxError(ctx context.Context, op, key string) error {
	err := ctx.Err()
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return fmt.Errorf("quorum: %s %q: %w: %w", op, key, err, cause)
	}
	return fmt.Errorf("quorum: %s %q: %w", op, key, err)
}

func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Node states during one attempt.
const (
	stPending uint8 = iota
	stOK
	stHeld
	stWarming
	stFailed   // answered with an error: the request may or may not have been applied
	stTimedOut // no answer by the deadline: the answer is still to come
)

// attempt makes one acquisition attempt. retryable is false when the error
// must not be retried (the Fencer failed).
func (l *Locker) attempt(ctx context.Context, key string, wg *sync.WaitGroup) (lease *Lease, err error, retryable bool) {
	token := rand.Text()
	var keys []string
	var args []any
	if l.cfg.guard {
		keys = []string{key, BootMarkerKey}
		args = []any{token, l.ttlArg, l.windowArg}
	} else {
		keys = []string{key}
		args = []any{token, l.ttlArg}
	}
	start := time.Now() // before the first request leaves
	c := l.fanOut(ctx, OpAcquire, start.Add(l.cfg.nodeTimeout), l.acquireScript, keys, args, nil, wg)

	n := len(l.nodes)
	var stBuf [16]uint8 // node states; on the stack for up to 16 nodes
	var st []uint8
	if n <= len(stBuf) {
		st = stBuf[:n]
	} else {
		st = make([]uint8, n)
	}
	t := newTally(n)
	read := 0
	var nodeErrs []NodeError
	fail := func(i int, err error) {
		t.failed++
		nodeErrs = append(nodeErrs, l.nodeError(i, err))
	}
	for t.verdict() == undecided && t.answered() < n {
		r, ok := c.next()
		if !ok {
			err := c.timeoutError()
			for i, s := range st {
				if s == stPending {
					st[i] = stTimedOut
					fail(i, err)
				}
			}
			break
		}
		read++
		switch {
		case r.err != nil:
			st[r.node] = stFailed
			fail(r.node, r.err)
		case r.val == 1:
			st[r.node] = stOK
			t.ok++
		case r.val < 0:
			st[r.node] = stWarming
			fail(r.node, warmingError(r.val))
		default:
			st[r.node] = stHeld
			t.held++
		}
	}
	elapsed := time.Since(start)
	var reason string
	if t.verdict() == won {
		if v := validity(l.cfg.ttl, elapsed, l.cfg.drift); v > 0 {
			lease = newLease(l, key, token, start, start.Add(v), c, wg)
			if l.cfg.fencer == nil {
				return lease, nil, true
			}
			return l.fence(ctx, lease, st, read, c)
		}
		reason = fmt.Sprintf("the vote took %v and left no validity", elapsed.Round(time.Microsecond))
	}
	qe := &QuorumError{Op: OpAcquire, Key: key, N: n, Quorum: l.quorum, Confirmed: t.ok, Held: t.held, Nodes: nodeErrs, Reason: reason, Err: t.cause()}
	if reason != "" {
		qe.Err = ErrQuorumUnavailable
	}
	l.releaseFailed(ctx, key, token, st, read, c, wg)
	return nil, qe, true
}

// fence asks the Fencer for the lease's fence token. A failure releases the
// lease and is not retried; running out of validity meanwhile releases it and
// may be retried.
func (l *Locker) fence(ctx context.Context, lease *Lease, st []uint8, read int, c *call) (*Lease, error, bool) {
	f, err := l.cfg.fencer.Next(ctx, lease.key)
	if err == nil && time.Now().Before(lease.until) {
		lease.fence = f
		return lease, nil, true
	}
	lease.stop()
	l.releaseFailed(ctx, lease.key, lease.token, st, read, c, lease.wg)
	if err != nil {
		return nil, fmt.Errorf("quorum: lock %q: fence: %w", lease.key, err), false
	}
	return nil, &QuorumError{
		Op: OpAcquire, Key: lease.key, N: len(l.nodes), Quorum: l.quorum, Confirmed: l.quorum,
		Reason: "the fencer answered after the validity ran out", Err: ErrQuorumUnavailable,
	}, true
}

// releaseFailed undoes a failed attempt. The nodes that granted the lock are
// released now (they answered quickly, so this is fast). The rest is left to
// a background drain: nodes that answered with an error (the SET may have
// been applied) are released at once, and every answer still to come is
// awaited — which the attempt's deadline bounds — and released as soon as
// it arrives if it granted the key or failed.
func (l *Locker) releaseFailed(ctx context.Context, key, token string, st []uint8, read int, c *call, wg *sync.WaitGroup) {
	var granted, failed []int
	for i, s := range st {
		switch s {
		case stOK:
			granted = append(granted, i)
		case stFailed:
			failed = append(failed, i)
		}
	}
	base := context.WithoutCancel(ctx)
	keys := []string{key}
	args := []any{token}
	if len(granted) > 0 {
		l.release(base, keys, args, granted, wg)
	}
	if unread := len(st) - read; unread > 0 || len(failed) > 0 {
		if wg != nil {
			wg.Add(1)
		}
		go l.drain(base, keys, args, failed, unread, c, wg)
	}
}

// drain releases the failed nodes, then waits for the unread answers of c
// and releases each node that granted the key or failed.
func (l *Locker) drain(ctx context.Context, keys []string, args []any, failed []int, unread int, c *call, wg *sync.WaitGroup) {
	if wg != nil {
		defer wg.Done()
	}
	if len(failed) > 0 {
		l.release(ctx, keys, args, failed, wg)
	}
	for range unread {
		r := <-c.results // every request of c returns by its deadline
		if r.err != nil || r.val == 1 {
			l.release(ctx, keys, args, []int{r.node}, wg)
		}
	}
}

// release runs compare-and-delete on targets and waits for their answers
// (at most one node timeout).
func (l *Locker) release(ctx context.Context, keys []string, args []any, targets []int, wg *sync.WaitGroup) {
	start := time.Now()
	c := l.fanOut(ctx, OpRelease, start.Add(l.cfg.nodeTimeout), l.releaseScript, keys, args, targets, wg)
	ev := ReleaseEvent{Key: keys[0]}
	for got := 0; got < len(targets); got++ {
		r, ok := c.next()
		switch {
		case !ok:
			ev.Failed += len(targets) - got
			got = len(targets)
		case r.err != nil:
			ev.Failed++
		case r.val == 1:
			ev.Released++
		default:
			ev.NotOwner++
		}
	}
	ev.Duration = time.Since(start)
	l.cfg.observer.ObserveRelease(ev)
}

func (l *Locker) nodeError(i int, err error) NodeError {
	return NodeError{Node: i, Addr: l.nodes[i].addr, Err: err}
}

// warmingError is the node error for the acquire script's answer -ms.
func warmingError(v int64) error {
	return fmt.Errorf("%w: %v left", ErrNodeWarming, time.Duration(-v)*time.Millisecond)
}

// nodeResult is one node's answer to one request.
type nodeResult struct {
	node int
	val  int64
	err  error
}

// call is one script run on a set of nodes at once, each request in its own
// goroutine under a shared deadline. Answers arrive on results, which is
// buffered so that no goroutine ever blocks on it; done is closed when every
// request has returned. Each goroutine reports its own error to the
// Observer, so a node that fails after the vote was decided is still seen.
type call struct {
	l        *Locker
	op       Op
	parent   context.Context // the caller's context
	ctx      context.Context // parent with the call's deadline
	cancel   context.CancelFunc
	deadline time.Time
	timeout  time.Duration // from the start to the deadline
	script   *redis.Script
	keys     []string
	args     []any
	results  chan nodeResult
	done     chan struct{}
	left     atomic.Int32
	wg       *sync.WaitGroup
}

// fanOut starts the script on targets (all nodes when targets is nil).
func (l *Locker) fanOut(ctx context.Context, op Op, deadline time.Time, s *redis.Script, keys []string, args []any, targets []int, wg *sync.WaitGroup) *call {
	n := len(l.nodes)
	if targets != nil {
		n = len(targets)
	}
	c := &call{l: l, op: op, parent: ctx, deadline: deadline, timeout: time.Until(deadline), script: s, keys: keys, args: args, results: make(chan nodeResult, n), done: make(chan struct{}), wg: wg}
	c.ctx, c.cancel = context.WithDeadline(ctx, deadline)
	if n == 0 {
		c.cancel()
		close(c.done)
		return c
	}
	c.left.Store(int32(n))
	if wg != nil {
		wg.Add(n)
	}
	if targets == nil {
		for i := range l.nodes {
			go c.run(i)
		}
	} else {
		for _, i := range targets {
			go c.run(i)
		}
	}
	return c
}

// isTimeout reports whether err means the node did not answer in time. The
// socket deadline that go-redis derives from the call's context may fire a
// moment before the context itself reports it, so the clock and the error's
// kind count too.
func isTimeout(c *call, err error) bool {
	if c.ctx.Err() != nil || !time.Now().Before(c.deadline) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// timeoutError is the error of a node that did not answer by the call's
// deadline: ErrNodeTimeout, or the caller's context error when the caller's
// context ended first.
func (c *call) timeoutError() error {
	if err := c.parent.Err(); err != nil {
		return err
	}
	return fmt.Errorf("%w: no answer within %v", ErrNodeTimeout, c.timeout.Round(time.Millisecond))
}

// next returns the next answer. It returns false once the deadline passed
// (or the parent context ended) and no answer is buffered. Answers that
// arrived before the call's context was cancelled are always returned: the
// last request cancels the context only after delivering its answer.
func (c *call) next() (nodeResult, bool) {
	select {
	case r := <-c.results:
		return r, true
	case <-c.ctx.Done():
		select {
		case r := <-c.results:
			return r, true
		default:
			return nodeResult{}, false
		}
	}
}

func (c *call) run(i int) {
	v, err := c.script.Run(c.ctx, c.l.nodes[i].client, c.keys, c.args...).Int64()
	if err != nil && c.parent.Err() == nil && isTimeout(c, err) {
		// Cut off by the call's own deadline (or the client's socket
		// timeout), not by the caller: keep context.DeadlineExceeded for
		// the caller's own context.
		err = fmt.Errorf("%w (%v)", ErrNodeTimeout, err)
	}
	switch {
	case err != nil:
		c.l.cfg.observer.ObserveNodeError(NodeEvent{Op: c.op, Key: c.keys[0], Node: i, Addr: c.l.nodes[i].addr, Err: err})
	case c.op == OpAcquire && v < 0:
		c.l.cfg.observer.ObserveNodeError(NodeEvent{Op: c.op, Key: c.keys[0], Node: i, Addr: c.l.nodes[i].addr, Err: warmingError(v)})
	}
	c.results <- nodeResult{node: i, val: v, err: err}
	if c.left.Add(-1) == 0 {
		c.cancel()
		close(c.done)
	}
	if c.wg != nil {
		c.wg.Done()
	}
}
