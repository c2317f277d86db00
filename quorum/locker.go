package quorum

import (
	"context"
	"crypto/rand"
	_ "embed" // the Lua scripts
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// BootMarkerKey is the key of the restart marker on every node (see
// WithAmnesiaGuard and TrustNode). It holds a node's run_id: the run_id of
// the running process when an operator vouched for it (TrustNode), or, with
// WithDurableNodes, of the process that first voted once past the window.
// It must never be given a TTL or be evicted.
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
// masters (Redlock). It is safe for concurrent use. Create it with New and
// Close it when done: it runs one goroutine per node (which sends that
// node's requests, batching those of concurrent callers into one pipeline)
// and, once a Lock has waited, one Pub/Sub connection per node; Close ends
// them.
type Locker struct {
	nodes  []node
	quorum int
	cfg    config

	acquireScript, releaseScript, extendScript *luaScript

	ttlArg, windowArg, durableArg any // boxed once

	wk      *waker        // wakes Lock waiters when a node announces a release
	workers []*nodeWorker // one per node, in the order of nodes

	// bg counts every node request and background release, so that Close
	// can wait for them; mu orders Add against Close's Wait.
	mu        sync.RWMutex
	closed    bool
	bg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

type node struct {
	client redis.UniversalClient
	addr   string
	own    *redis.Client // a client New opened (see New), closed by Close
}

// New returns a Locker over nodes, which must be independent Redis masters
// (not replicas of one another, and not the same server twice). Use an odd
// number: 2f+1 nodes keep working with f nodes down.
//
// Every node request must end at the node timeout and must not be retried
// by the client behind the Locker's back (a retried release cannot tell
// "deleted by my first try" from "never mine"). A *redis.Client whose
// options already ensure both (ContextTimeoutEnabled true, MaxRetries -1,
// ReadTimeout and WriteTimeout not -2) is used as given. For any other
// *redis.Client, New opens its own client to the same node from a copy of
// its options with just those settings corrected (same address, dialer,
// credentials and TLS), and Close closes it; hooks added to the given
// client do not see the Locker's requests then. Other UniversalClient
// implementations are used as given; the scripts are safe under a client
// retry (an acquire retried on its own key answers "ours").
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
				errs = append(errs, fmt.Errorf("nodes[%d] is a %T: with the restart guard each node must be one master (a *redis.Client)", i, c))
			}
		}
		if rc, ok := c.(*redis.Client); ok && rc.Options().Addr == failoverAddr && needsOwn(rc.Options()) {
			// A copy would not follow the failovers the original tracks.
			errs = append(errs, fmt.Errorf("nodes[%d] is a Sentinel failover client that lets a request outlive its deadline or retries it: set ContextTimeoutEnabled: true and MaxRetries: -1 (and no negative Read/WriteTimeout) in its FailoverOptions", i))
		}
		l.nodes[i] = node{client: c, addr: addr}
	}
	if err := cfg.resolve(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("quorum: New: %w", errors.Join(errs...))
	}
	for i := range l.nodes {
		if c, ok := l.nodes[i].client.(*redis.Client); ok {
			if own := ownClient(c); own != nil {
				l.nodes[i].client, l.nodes[i].own = own, own
			}
		}
	}
	l.cfg = cfg
	l.wk = newWaker(l)
	l.acquireScript = newLuaScript(acquireSrc)
	l.releaseScript = newLuaScript(releaseSrc)
	l.extendScript = newLuaScript(extendSrc)
	l.ttlArg = cfg.ttl.Milliseconds()
	l.windowArg = cfg.window.Milliseconds()
	l.durableArg = "0"
	if cfg.durable {
		l.durableArg = "1"
	}
	for i := range l.nodes {
		l.workers = append(l.workers, newNodeWorker(l, i))
	}
	return l, nil
}

// needsOwn reports whether options o (as processed by NewClient, where
// MaxRetries 0 means none and a timeout of -1 means no deadline at all) let
// a request outlive its context's deadline or retry it.
func needsOwn(o *redis.Options) bool {
	return !o.ContextTimeoutEnabled || o.MaxRetries != 0 || o.ReadTimeout < 0 || o.WriteTimeout < 0
}

// ownClient returns a new client to c's node when c's options need it (see
// needsOwn), else nil.
func ownClient(c *redis.Client) *redis.Client {
	o := c.Options()
	if !needsOwn(o) {
		return nil
	}
	cp := *o
	cp.ContextTimeoutEnabled = true
	cp.MaxRetries = -1
	// Processed 0 means "no timeout", -1 "no deadline at all"; unprocessed
	// -1 means "no timeout" and lets the context's deadline apply.
	if cp.ReadTimeout <= 0 {
		cp.ReadTimeout = -1
	}
	if cp.WriteTimeout <= 0 {
		cp.WriteTimeout = -1
	}
	// State that belongs to the given client alone.
	cp.ClientSideCache, cp.ClientSideCacheConfig, cp.PushNotificationProcessor = nil, nil, nil
	return redis.NewClient(&cp)
}

// Close stops the Locker: it waits for every node request and background
// release it started, releases included that a failed attempt had queued
// (each ends within about two node timeouts), and closes the clients New
// opened. Lock, TryLock and Do fail with ErrClosed afterwards, and Extend
// and Unlock on leases still held reach no node (they expire by their TTL).
// Close is idempotent and safe to call concurrently.
func (l *Locker) Close() error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.bg.Wait()
	l.closeOnce.Do(func() {
		l.closeWorkers()
		l.wk.close()
		var errs []error
		for _, n := range l.nodes {
			if n.own != nil {
				errs = append(errs, n.own.Close())
			}
		}
		l.closeErr = errors.Join(errs...)
	})
	return l.closeErr
}

func (l *Locker) isClosed() bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.closed
}

// track counts n background tasks, or returns false once the Locker is
// closed.
func (l *Locker) track(n int) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return false
	}
	l.bg.Add(n)
	return true
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

// failoverAddr is the address go-redis reports for every Sentinel failover
// client: it names no master, so it cannot tell two masters apart.
const failoverAddr = "FailoverClient"

func addrOf(c redis.UniversalClient) string {
	if c, ok := c.(*redis.Client); ok {
		if a := c.Options().Addr; a != failoverAddr {
			return a
		}
	}
	return ""
}

// TTL returns the lease TTL of the Locker.
func (l *Locker) TTL() time.Duration { return l.cfg.ttl }

// Lock acquires key, retrying with a jittered exponential backoff until it
// succeeds, ctx ends, or the retry budget (WithRetry, WithMaxWait) is spent.
// On failure the error matches ErrNotAcquired or ErrQuorumUnavailable (and
// is or wraps a *QuorumError), or wraps ctx.Err() when ctx ended, or wraps
// the Fencer's error, or matches ErrClosed. It returns at the verdict of its
// last attempt: within WithMaxWait plus one node timeout (plus the Fencer's
// call), and as soon as ctx ends; what a failed attempt took is released in
// the background.
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
		return fmt.Errorf("quorum: key %q is reserved for the restart marker", key)
	}
	return nil
}

// lock runs up to attempts attempts (0: no count limit) within maxWait (0:
// no time limit). Goroutines it starts are counted in wg when wg is not nil.
func (l *Locker) lock(ctx context.Context, key string, attempts int, maxWait time.Duration, wg *sync.WaitGroup) (*Lease, error) {
	if err := l.checkKey(key); err != nil {
		return nil, err
	}
	if l.isClosed() {
		return nil, fmt.Errorf("quorum: lock %q: %w", key, ErrClosed)
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
		wt       *waiter // set once the key was found held
		wakeups  int
	)
	defer func() { l.wk.unregister(wt) }()
	if attempts != 1 {
		// Other Lock calls of this Locker wait for the key: take a place
		// behind them instead of overtaking them the moment the key is
		// released, so that they are served in order.
		if wt = l.wk.join(key); wt != nil {
			d := backoffDelay(0, l.cfg.retry.BaseDelay, l.cfg.retry.MaxDelay, mrand.Int64N)
			if !deadline.IsZero() {
				d = min(d, time.Until(deadline))
			}
			live, woken := l.await(ctx, wt, d, deadline)
			if !live {
				err := ctxError(ctx, "lock", key)
				l.cfg.observer.ObserveAcquire(AcquireEvent{Key: key, Duration: time.Since(start), Result: resultOf(err), Err: err})
				return nil, err
			}
			if woken {
				wakeups++
			}
		}
	}
	for {
		if ctxErr(ctx) != nil {
			lastErr, canceled = ctxError(ctx, "lock", key), true
			break
		}
		n++
		l.wk.attempting(wt)
		lease, err, retryable := l.attempt(ctx, key, wg)
		if err == nil {
			l.cfg.observer.ObserveAcquire(AcquireEvent{Key: key, Attempts: n, Wakeups: wakeups, Duration: time.Since(start), Result: ResultAcquired})
			return lease, nil
		}
		lastErr = err
		if ctxErr(ctx) != nil {
			lastErr, canceled = ctxError(ctx, "lock", key), true
			break
		}
		if !retryable || (attempts > 0 && n >= attempts) || l.isClosed() {
			break
		}
		d := backoffDelay(n-1, l.cfg.retry.BaseDelay, l.cfg.retry.MaxDelay, mrand.Int64N)
		if wt == nil && errors.Is(err, ErrNotAcquired) {
			// Someone holds the key: be told when it is released.
			wt = l.wk.register(key)
		}
		// Past the wait budget a backoff ends the call; a release message
		// before then still earns one more attempt, but once the budget is
		// spent no wake-up buys another.
		last := !deadline.IsZero() && time.Now().Add(d).After(deadline)
		if last {
			if wt == nil || !time.Now().Before(deadline) {
				break
			}
			d = time.Until(deadline)
		}
		live, woken := true, false
		if wt != nil {
			live, woken = l.await(ctx, wt, d, deadline)
		} else {
			live = sleep(ctx, d)
		}
		if !live {
			lastErr, canceled = ctxError(ctx, "lock", key), true
			break
		}
		if woken {
			wakeups++
		} else if last {
			break
		}
	}
	if n > 1 && !canceled {
		lastErr = fmt.Errorf("quorum: lock %q: gave up after %d attempts in %v: %w", key, n, time.Since(start).Round(time.Millisecond), lastErr)
	}
	l.cfg.observer.ObserveAcquire(AcquireEvent{Key: key, Attempts: n, Wakeups: wakeups, Duration: time.Since(start), Result: resultOf(lastErr), Err: lastErr})
	return nil, lastErr
}

// await waits up to d for a release of wt's key. A waiter behind others
// of this Locker does not try when its backoff ends: it keeps its place
// and waits another backoff (up to deadline, when set), so that only the
// oldest waiter polls. It reports whether ctx is still live and whether a
// release ended the wait.
func (l *Locker) await(ctx context.Context, wt *waiter, d time.Duration, deadline time.Time) (live, woken bool) {
	for retry := 0; ; retry++ {
		live, woken = wt.wait(ctx, d)
		if !live || woken || l.wk.front(wt) {
			return live, woken
		}
		if !deadline.IsZero() && !time.Now().Before(deadline) {
			return true, false
		}
		d = backoffDelay(retry, l.cfg.retry.BaseDelay, l.cfg.retry.MaxDelay, mrand.Int64N)
		if !deadline.IsZero() {
			d = min(d, time.Until(deadline))
		}
	}
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
	err := ctxErr(ctx)
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

// attempt makes one acquisition attempt. retryable is false when the error
// must not be retried (the Fencer failed).
func (l *Locker) attempt(ctx context.Context, key string, wg *sync.WaitGroup) (lease *Lease, err error, retryable bool) {
	token := rand.Text()
	// Boxed once: the release and the extensions reuse them.
	var bkey, btoken any = key, token
	var cmdArgs []any
	if l.cfg.guard {
		cmdArgs = []any{"evalsha", l.acquireScript.bsha, 2, bkey, BootMarkerKey, btoken, l.ttlArg, l.windowArg, l.durableArg}
	} else {
		cmdArgs = []any{"evalsha", l.acquireScript.bsha, 1, bkey, btoken, l.ttlArg}
	}
	start := time.Now() // before the first request leaves
	c := l.fanOut(ctx, OpAcquire, start.Add(l.cfg.nodeTimeout), l.acquireScript, key, cmdArgs, nil, wg)
	var stBuf [16]uint8 // node states on the stack for up to 16 nodes
	st := states(stBuf[:], len(l.nodes))
	v := l.collect(c, true, classifyAcquire, st)
	var reason string
	if v.t.verdict() == won {
		if until := l.cfg.leaseEnd(start, l.cfg.ttl); time.Now().Before(until) {
			lease = newLease(l, key, token, start, until, c, wg)
			lease.bkey, lease.btoken = bkey, btoken
			if l.cfg.fencer != nil {
				return l.fence(ctx, lease, st, v.read, c)
			}
			lease.arm()
			return lease, nil, true
		}
		reason = fmt.Sprintf("the vote took %v and left no validity", time.Since(start).Round(time.Microsecond))
	}
	sentinel := v.t.cause()
	if reason != "" {
		sentinel = ErrQuorumUnavailable
	}
	qe := l.quorumError(OpAcquire, key, v.t.ok, v.t.held, v.errs, reason, sentinel)
	l.undo(ctx, key, token, st, v.read, c, wg)
	return nil, qe, true
}

// classifyAcquire reads the acquire script's answer.
func classifyAcquire(val int64) (uint8, error) {
	switch {
	case val == 1:
		return stYes, nil
	case val == 0:
		return stNo, nil
	case val < 0:
		return stFailed, warmingError(val)
	}
	return stFailed, fmt.Errorf("quorum: unexpected acquire answer %d", val)
}

// fence asks the Fencer for the lease's fence token, with the lease's
// validity as deadline. A failure releases the lease and is not retried;
// running out of validity meanwhile releases it and may be retried.
func (l *Locker) fence(ctx context.Context, lease *Lease, st []uint8, read int, c *call) (*Lease, error, bool) {
	fctx, cancel := context.WithDeadline(ctx, lease.until)
	f, err := l.cfg.fencer.Next(fctx, lease.key)
	cancel()
	if err == nil && time.Now().Before(lease.until) {
		lease.fence = f
		lease.arm()
		return lease, nil, true
	}
	lease.stop()
	l.undo(ctx, lease.key, lease.token, st, read, c, lease.wg)
	if err != nil && (ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded)) {
		return nil, fmt.Errorf("quorum: lock %q: fence: %w", lease.key, err), false
	}
	return nil, l.quorumError(OpAcquire, lease.key, l.quorum, 0, nil, "the fencer answered after the validity ran out", ErrQuorumUnavailable), true
}

// undo releases what a failed attempt may have taken, in the background so
// that Lock returns at once: nodes that granted the key or failed (the SET
// may have been applied) are released now, and every answer still to come
// is awaited (the attempt's deadline bounds it) and released as soon as it
// arrives if it granted the key or failed. A release never overtakes the
// node's own late SET, since it is sent only after that SET answered.
func (l *Locker) undo(ctx context.Context, key, token string, st []uint8, read int, c *call, wg *sync.WaitGroup) {
	var now []int
	for i, s := range st {
		if s == stYes || s == stFailed {
			now = append(now, i)
		}
	}
	unread := c.n - read
	if len(now) == 0 && unread == 0 {
		return
	}
	if !l.track(1) {
		return // closed: the keys expire by their TTL
	}
	if wg != nil {
		wg.Add(1)
	}
	go l.drain(context.WithoutCancel(ctx), key, token, now, unread, c, wg)
}

// drain releases the nodes in now, then waits for the unread answers of c
// and releases each node that granted the key or failed. It gives up on
// answers that have not come one node timeout after c's deadline (a client
// that does not honour the deadline): those keys expire by their TTL.
func (l *Locker) drain(ctx context.Context, key, token string, now []int, unread int, c *call, wg *sync.WaitGroup) {
	defer l.bg.Done()
	if wg != nil {
		defer wg.Done()
	}
	keys, args := []string{key}, []any{token}
	if len(now) > 0 {
		l.release(ctx, keys, args, now, wg)
	}
	if unread == 0 {
		return
	}
	var grace <-chan time.Time // armed once c's deadline passed
	done := c.ctx.Done()
	for got := 0; got < unread; {
		if r, ok := c.take(); ok {
			got++
			if r.err != nil || r.val == 1 {
				l.release(ctx, keys, args, []int{r.node}, wg)
			}
			continue
		}
		select {
		case <-c.ready:
		case <-done:
			// The caller may have cancelled early: wait out the call's own
			// deadline, then one node timeout more.
			t := time.NewTimer(time.Until(c.deadline) + l.cfg.nodeTimeout)
			defer t.Stop()
			grace, done = t.C, nil
		case <-grace:
			return
		}
	}
}

// release runs compare-and-delete on targets and waits for their answers
// (at most one node timeout).
func (l *Locker) release(ctx context.Context, keys []string, args []any, targets []int, wg *sync.WaitGroup) {
	start := time.Now()
	c := l.fanOutBG(ctx, OpRelease, start.Add(l.cfg.nodeTimeout), l.releaseScript, keys[0], l.releaseScript.evalsha(keys[0], args...), targets, wg)
	var stBuf [16]uint8
	v := l.collect(c, false, classifyRelease, states(stBuf[:], len(l.nodes)))
	l.cfg.observer.ObserveRelease(ReleaseEvent{Key: keys[0], Duration: time.Since(start), Released: v.t.ok, NotOwner: v.t.held, Failed: v.t.failed})
}

// classifyRelease reads the release script's answer.
func classifyRelease(val int64) (uint8, error) {
	switch val {
	case 1:
		return stYes, nil
	case 0:
		return stNo, nil
	}
	return stFailed, fmt.Errorf("quorum: unexpected release answer %d", val)
}
