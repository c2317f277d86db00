package quorum

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// nodeResult is one node's answer to one request.
type nodeResult struct {
	node int
	val  int64
	err  error
}

// call is one script run on a set of nodes at once: one request to each
// node's worker (see nodeWorker), all under a shared deadline. Answers
// arrive on results, which is buffered so that no worker ever blocks on
// it; the call's context is cancelled when every request has returned.
//
// Every operation (acquire, extend, unlock, release) goes through fanOut
// and collect: this is the only place that talks to the nodes.
type call struct {
	l        *Locker
	op       Op
	parent   context.Context // the caller's context
	ctx      context.Context // parent with the call's deadline
	cancel   context.CancelFunc
	deadline time.Time
	timeout  time.Duration // from the start to the deadline
	script   *luaScript
	key      string // the lock key (the script's first key)
	cmdArgs  []any  // EVALSHA sha numkeys keys... args...: built once, sent to every node
	n        int    // requests sent
	targets  []int  // the nodes asked; nil means every node
	// The answers, in arrival order: the workers add them (add), the
	// caller takes them (take, next). ready signals a new one.
	mu     sync.Mutex
	res    []nodeResult // in resBuf while there is room
	resBuf [8]nodeResult
	taken  int
	ready  chan struct{} // capacity 1
	left   atomic.Int32
	wg     *sync.WaitGroup

	// record, when set, sees every answer as it arrives, even after the
	// caller stopped reading: the way a call that returned early still
	// learns how its stragglers ended.
	record recorder
	// stop ends the caller's wait (next) without cancelling the requests:
	// set for detached calls, whose requests run to their own deadline
	// whatever happens to the caller's context.
	stop <-chan struct{}
}

// recorder sees each answer of a call as it arrives (see call.record).
type recorder interface {
	record(nodeResult)
}

// callOpts are the optional parts of a call.
type callOpts struct {
	record   recorder
	detached bool
}

// fanOut starts the script on targets (all nodes when targets is nil). Each
// request is counted in the Locker's background group (so that Close waits
// for it) and in wg when wg is not nil. After Close, no request is sent and
// every target answers ErrClosed at once.
func (l *Locker) fanOut(ctx context.Context, op Op, deadline time.Time, s *luaScript, key string, cmdArgs []any, targets []int, wg *sync.WaitGroup) *call {
	return l.startCall(ctx, op, deadline, s, key, cmdArgs, targets, wg, false, callOpts{})
}

// fanOutWith is fanOut with the optional parts of a call.
func (l *Locker) fanOutWith(ctx context.Context, op Op, deadline time.Time, s *luaScript, key string, cmdArgs []any, targets []int, wg *sync.WaitGroup, o callOpts) *call {
	return l.startCall(ctx, op, deadline, s, key, cmdArgs, targets, wg, false, o)
}

// fanOutBG is fanOut for a goroutine already counted in the background
// group (a failed attempt's undo): its requests are sent even while Close
// waits, so that Close does not strand what the undo had to release.
func (l *Locker) fanOutBG(ctx context.Context, op Op, deadline time.Time, s *luaScript, key string, cmdArgs []any, targets []int, wg *sync.WaitGroup) *call {
	return l.startCall(ctx, op, deadline, s, key, cmdArgs, targets, wg, true, callOpts{})
}

func (l *Locker) startCall(ctx context.Context, op Op, deadline time.Time, s *luaScript, key string, cmdArgs []any, targets []int, wg *sync.WaitGroup, counted bool, o callOpts) *call {
	n := len(l.nodes)
	if targets != nil {
		n = len(targets)
	}
	c := &call{l: l, op: op, parent: ctx, deadline: deadline, timeout: time.Until(deadline), script: s, key: key, cmdArgs: cmdArgs, n: n, targets: targets, ready: make(chan struct{}, 1), wg: wg,
		record: o.record}
	if o.detached {
		c.ctx, c.cancel = context.WithDeadline(context.WithoutCancel(ctx), deadline)
		c.stop = ctx.Done()
	} else {
		c.ctx, c.cancel = context.WithDeadline(ctx, deadline)
	}
	if n == 0 {
		c.cancel()
		return c
	}
	if counted {
		l.bg.Add(n) // the counter is above zero: this goroutine is in it
	} else if !l.track(n) {
		for i := range n {
			node := i
			if targets != nil {
				node = targets[i]
			}
			r := nodeResult{node: node, err: ErrClosed}
			if c.record != nil {
				c.record.record(r)
			}
			c.add(r)
		}
		c.cancel()
		return c
	}
	c.left.Store(int32(n))
	if wg != nil {
		wg.Add(n)
	}
	if targets == nil {
		for _, w := range l.workers {
			w.submit(c)
		}
	} else {
		for _, i := range targets {
			l.workers[i].submit(c)
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

// ctxErr returns ctx's error, or context.DeadlineExceeded once ctx's
// deadline has passed even if its timer has not fired yet: a socket
// deadline derived from it can fire first, and what happens at or after the
// caller's deadline is the caller's deadline, not a node's timeout.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// timeoutError is the error of a node that did not answer by the call's
// deadline: ErrNodeTimeout, or the caller's context error when the caller's
// context ended first.
func (c *call) timeoutError() error {
	if err := ctxErr(c.parent); err != nil {
		return err
	}
	return fmt.Errorf("%w: no answer within %v", ErrNodeTimeout, c.timeout.Round(time.Millisecond))
}

// add records an answer; it never blocks.
func (c *call) add(r nodeResult) {
	c.mu.Lock()
	if c.res == nil {
		c.res = c.resBuf[:0]
	}
	c.res = append(c.res, r)
	c.mu.Unlock()
	select {
	case c.ready <- struct{}{}:
	default: // the reader has a signal pending already
	}
}

// take returns the oldest answer not taken yet, if any.
func (c *call) take() (nodeResult, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.taken < len(c.res) {
		r := c.res[c.taken]
		c.taken++
		return r, true
	}
	return nodeResult{}, false
}

// next returns the next answer. It returns false once the deadline passed
// (or the parent context ended) and no answer is waiting. Answers that
// arrived before the call's context was cancelled are always returned: the
// last request cancels the context only after delivering its answer.
func (c *call) next() (nodeResult, bool) {
	for {
		if r, ok := c.take(); ok {
			return r, true
		}
		select {
		case <-c.ready:
			continue
		case <-c.ctx.Done():
		case <-c.stop: // nil unless detached
		}
		return c.take()
	}
}

// luaScript is one of the package's Lua scripts: its source and SHA-1.
type luaScript struct {
	src, sha string
	bsha     any // sha, boxed once
}

func newLuaScript(src string) *luaScript {
	h := sha1.Sum([]byte(src))
	sha := hex.EncodeToString(h[:])
	return &luaScript{src: src, sha: sha, bsha: sha}
}

// evalsha returns the arguments of an EVALSHA of the script on one key:
// "evalsha", sha, 1, key, args....
func (s *luaScript) evalsha(key any, args ...any) []any {
	a := make([]any, 4, 4+len(args))
	a[0], a[1], a[2], a[3] = "evalsha", s.bsha, 1, key
	return append(a, args...)
}

// evalArgs turns EVALSHA arguments into those of the EVAL of the same
// call, for a node that lost the script.
func (s *luaScript) evalArgs(cmdArgs []any) []any {
	return append([]any{"eval", s.src}, cmdArgs[2:]...)
}

// errUnsent is the cause of a request dropped before it left because its
// deadline had passed while it waited for the node's earlier requests.
var errUnsent = errors.New("not sent: the deadline passed while earlier requests to the node were out")

// errNodeTimeout wraps a timeout of one node request.
func errNodeTimeout(err error) error { return fmt.Errorf("%w (%v)", ErrNodeTimeout, err) }

// deliver hands node i's answer to the call. Each node's worker calls it
// once per request; the last one ends the call. The Observer hears every
// node error here, so a node that fails after the vote was decided is
// still seen.
func (c *call) deliver(i int, v int64, err error) {
	switch {
	case err != nil:
		c.l.cfg.observer.ObserveNodeError(NodeEvent{Op: c.op, Key: c.key, Node: i, Addr: c.l.nodes[i].addr, Err: err})
	case c.op == OpAcquire && v < 0:
		c.l.cfg.observer.ObserveNodeError(NodeEvent{Op: c.op, Key: c.key, Node: i, Addr: c.l.nodes[i].addr, Err: warmingError(v)})
	}
	r := nodeResult{node: i, val: v, err: err}
	if c.record != nil {
		c.record.record(r)
	}
	c.add(r)
	if c.left.Add(-1) == 0 {
		c.cancel()
	}
	if c.wg != nil {
		c.wg.Done()
	}
	c.l.bg.Done()
}

// Node states during one vote.
const (
	stPending  uint8 = iota
	stYes            // granted, extended or released
	stNo             // held by another owner, or the token was not there
	stFailed         // answered with an error: the request may or may not have been applied
	stTimedOut       // no answer by the deadline: the answer is still to come
)

// vote is the outcome of collecting one call's answers. The node states
// live in a slice the caller owns (see states), kept out of this struct so
// that a caller's stack buffer stays on the stack when errs escapes into an
// error.
type vote struct {
	t    tally
	errs []NodeError // nodes that failed, timed out or were warming
	read int         // answers read from the call
}

// classifier maps a node's successful answer to stYes or stNo, or returns
// a node error (stFailed) for answers that are neither.
type classifier func(val int64) (uint8, error)

// states returns n cleared node states, in buf when it is long enough.
func states(buf []uint8, n int) []uint8 {
	if n > len(buf) {
		return make([]uint8, n)
	}
	st := buf[:n]
	clear(st)
	return st
}

// collect reads c's answers into a vote and st (one state per node, from
// states). With early it stops as soon as the vote is decided (a majority
// of all nodes said yes, or can no longer); otherwise it reads every
// target. It never waits past the call's deadline (or the caller's
// context): targets still unanswered then are stTimedOut.
func (l *Locker) collect(c *call, early bool, classify classifier, st []uint8) vote {
	stop := stopNever
	if early {
		stop = stopDecided
	}
	return l.collectFrom(c, stop, classify, st, newTally(len(l.nodes)))
}

// When collectFrom stops before every target answered.
const (
	stopNever   = iota // read every target
	stopDecided        // as soon as a majority said yes, or can no longer
	stopWon            // as soon as a majority said yes
)

// collectFrom is collect with a vote that starts from base: the answers of
// earlier calls of the same operation (a retried Unlock).
func (l *Locker) collectFrom(c *call, stop int, classify classifier, st []uint8, base tally) vote {
	n := len(l.nodes)
	v := vote{t: base}
	targets := c.n
	for v.read < targets {
		if vd := v.t.verdict(); (stop == stopDecided && vd != undecided) || (stop == stopWon && vd == won) {
			break
		}
		r, ok := c.next()
		if !ok {
			err := c.timeoutError()
			timedOut := func(i int) {
				if st[i] == stPending {
					st[i] = stTimedOut
					v.t.failed++
					v.errs = append(v.errs, l.nodeError(i, err))
				}
			}
			if c.targets == nil {
				for i := range n {
					timedOut(i)
				}
			} else {
				for _, i := range c.targets {
					timedOut(i)
				}
			}
			break
		}
		v.read++
		if r.err != nil {
			st[r.node] = stFailed
			v.t.failed++
			v.errs = append(v.errs, l.nodeError(r.node, r.err))
			continue
		}
		s, err := classify(r.val)
		switch {
		case err != nil:
			st[r.node] = stFailed
			v.t.failed++
			v.errs = append(v.errs, l.nodeError(r.node, err))
		case s == stYes:
			st[r.node] = stYes
			v.t.ok++
		default:
			st[r.node] = stNo
			v.t.held++
		}
	}
	return v
}

// quorumError is the one place that builds a *QuorumError: confirmed and
// held count the nodes that said yes and no (for Unlock, over every try).
func (l *Locker) quorumError(op Op, key string, confirmed, held int, errs []NodeError, reason string, sentinel error) *QuorumError {
	return &QuorumError{
		Op: op, Key: key, N: len(l.nodes), Quorum: l.quorum,
		Confirmed: confirmed, Held: held, Nodes: errs, Reason: reason, Err: sentinel,
	}
}

func (l *Locker) nodeError(i int, err error) NodeError {
	return NodeError{Node: i, Addr: l.nodes[i].addr, Err: err}
}

// warmingError is the node error for the acquire script's answer -ms.
func warmingError(v int64) error {
	return fmt.Errorf("%w: %v left", ErrNodeWarming, time.Duration(-v)*time.Millisecond)
}
