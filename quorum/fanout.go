package quorum

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/lease"
)

// request is one run of op's script on a set of nodes at once (see send).
type request struct {
	op       Op
	script   *luaScript // what args run (see luaScript.evalsha)
	key      string     // the target's name (see target)
	keys     []string   // the target's keys
	args     []any      // EVALSHA sha numkeys keys... args...: built once for every node
	deadline time.Time
	targets  []int    // the nodes asked; nil means every node
	fast     bool     // on the fast lane (see lanes)
	detached bool     // runs to its deadline even if the caller's context ends first
	counted  bool     // the sender holds an in-flight count for it (see releaseBG)
	onAnswer answerer // sees every answer, even after the caller stopped reading
}

// answerer is told of every answer to a request (see releaseRun).
type answerer interface {
	record(nodeResult)
}

// nodeResult is one node's answer to one request.
type nodeResult struct {
	node int
	val  int64
	err  error
}

// call is a request under way: workers deliver answers, next takes them in order.
type call struct {
	l        *Locker
	req      request
	parent   context.Context // the caller's context
	ctx      callCtx         // the requests' (see callCtx); ends when the last answers
	timeout  time.Duration   // from the start to the deadline
	n        int             // requests sent
	left     atomic.Int32
	ready    chan struct{} // capacity 1: a new answer
	mu       sync.Mutex
	res      []nodeResult // in resBuf while there is room
	resBuf   [8]nodeResult
	taken    int
	undoArgs []any // once undone: the release of what the call won (see undo)
}

// send starts r on its targets (the one way to the workers) and returns the
// call. Close waits for each node request; after Close, all answer lease.ErrClosed.
func (l *Locker) send(ctx context.Context, r request) *call {
	n := len(l.nodes)
	if r.targets != nil {
		n = len(r.targets)
	}
	c := &call{l: l, req: r, parent: ctx, timeout: time.Until(r.deadline), n: n, ready: make(chan struct{}, 1)}
	c.res = c.resBuf[:0]
	c.ctx.start(ctx, r.deadline, r.detached)
	if r.counted {
		l.inflight.Add(n)
	} else if n == 0 || !l.enter(n) {
		for i := range n {
			c.add(nodeResult{node: c.target(i), err: lease.ErrClosed})
		}
		c.ctx.end(context.Canceled)
		return c
	}
	c.left.Store(int32(n))
	for i := range n {
		l.workers[c.target(i)].submit(c)
	}
	return c
}

func (c *call) target(i int) int {
	if c.req.targets == nil {
		return i
	}
	return c.req.targets[i]
}

// deliver hands node i's answer to the call; the Observer hears every node
// error here. An undone acquisition's answer that may have set the key is
// released at once, by the same worker, so after the SET it answers.
func (c *call) deliver(i int, v int64, err error) {
	oerr := err
	if err == nil && c.req.op == OpAcquire && v < 0 {
		oerr = warmingError(v)
	}
	if oerr != nil {
		c.l.cfg.observer.ObserveNodeError(lease.NodeEvent{Op: c.req.op.String(), Key: c.req.key, Node: i, Addr: c.l.nodes[i].addr, Err: oerr})
	}
	r := nodeResult{node: i, val: v, err: err}
	if c.req.onAnswer != nil {
		c.req.onAnswer.record(r)
	}
	if undo := c.add(r); undo != nil && mayHold(r) {
		// Counted before this request leaves the count, so Close waits.
		c.l.releaseBG(c.parent, c.req, undo, []int{i}, true)
	}
	if c.left.Add(-1) == 0 {
		c.ctx.end(context.Canceled)
	}
	c.l.inflight.Done()
}

// add records an answer or, once undone, returns the release args it needs.
func (c *call) add(r nodeResult) []any {
	c.mu.Lock()
	if c.undoArgs != nil {
		c.mu.Unlock()
		return c.undoArgs
	}
	c.res = append(c.res, r)
	c.mu.Unlock()
	signal(c.ready)
	return nil
}

// take returns the oldest answer not taken yet, if any.
func (c *call) take() (nodeResult, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.taken < len(c.res) {
		c.taken++
		return c.res[c.taken-1], true
	}
	return nodeResult{}, false
}

// answered reports whether node n's answer was taken (see next).
func (c *call) answered(n int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.ContainsFunc(c.res[:c.taken], func(r nodeResult) bool { return r.node == n })
}

// next returns the next answer, or false once the deadline passed (or the
// caller's context ended) and none is waiting. The last request cancels
// the call's context only after delivering, so no answer is missed.
func (c *call) next() (nodeResult, bool) {
	var stop <-chan struct{}
	if c.req.detached {
		stop = c.parent.Done()
	}
	for {
		if r, ok := c.take(); ok {
			return r, true
		}
		select {
		case <-c.ready:
			continue
		case <-c.ctx.Done():
		case <-stop:
		}
		return c.take()
	}
}

// mayHold: the node granted the key, or failed (the SET may have applied).
func mayHold(r nodeResult) bool { return r.err != nil || r.val == 1 }

// ctxErr returns ctx's error, or DeadlineExceeded once its deadline passed,
// even before its timer fired (a socket deadline derived from it may fire first).
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// lateError is the error of a node that gave no answer by the deadline, or
// whose request was dropped unsent: ErrNodeTimeout, or the caller's ctx error.
func (c *call) lateError(unsent bool) error {
	if err := ctxErr(c.parent); err != nil {
		return err
	}
	if unsent {
		return fmt.Errorf("%w (not sent: the deadline passed while earlier requests to the node were out)", ErrNodeTimeout)
	}
	return fmt.Errorf("%w: no answer within %v", ErrNodeTimeout, c.timeout.Round(time.Millisecond))
}

// nodeErr maps an error of c's request: one cut off by the call's own
// deadline or a socket timeout, not by the caller, is a node timeout. The
// socket deadline may fire before the context reports it, hence the clock.
func (c *call) nodeErr(err error) error {
	if err == nil || ctxErr(c.parent) != nil {
		return err
	}
	var ne net.Error
	if c.ctx.Err() != nil || !time.Now().Before(c.req.deadline) || errors.Is(err, os.ErrDeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout()) {
		return fmt.Errorf("%w (%v)", ErrNodeTimeout, err)
	}
	return err
}

// luaScript is one of the package's Lua scripts: its source and SHA-1.
type luaScript struct {
	src  string
	bsha any // the hex SHA-1, boxed once
}

func newLuaScript(src string) *luaScript {
	h := sha1.Sum([]byte(src))
	return &luaScript{src: src, bsha: hex.EncodeToString(h[:])}
}

// evalsha returns the arguments of an EVALSHA of the script on keys, argv.
func (s *luaScript) evalsha(keys []any, argv ...any) []any {
	a := append(make([]any, 0, 3+len(keys)+len(argv)), "evalsha", s.bsha, len(keys))
	return append(append(a, keys...), argv...)
}

// target is what a lease locks: its keys, sorted and distinct, all or nothing.
type target struct {
	name  string      // the key, or the keys joined by "," (the Observer's, the errors')
	keys  []string    // sorted, distinct
	boxed []any       // the keys boxed once, for every request's arguments
	fence fencePolicy // which keys the Fencer gives a fence (the zero value: all)
}

// fencePolicy says which keys of a target get a fence from the Fencer.
type fencePolicy uint8

const (
	fenceAll   fencePolicy = iota // every key (a lock)
	fenceFirst                    // the first key only (a write lock: its name, not its readers' permits)
	fenceNone                     // none (a read lock: readers do not exclude one another)
)

// fenced returns how many keys, from the first, get a fence.
func (t target) fenced() int {
	switch t.fence {
	case fenceFirst:
		return 1
	case fenceNone:
		return 0
	}
	return len(t.keys)
}

// oneKey holds a one-key target's slices, in one allocation.
type oneKey struct {
	keys  [1]string
	boxed [1]any
}

func newTarget(keys []string) (target, error) {
	if len(keys) == 1 && keys[0] != "" && keys[0] != BootMarkerKey {
		o := &oneKey{keys: [1]string{keys[0]}, boxed: [1]any{keys[0]}}
		return target{name: keys[0], keys: o.keys[:], boxed: o.boxed[:]}, nil
	}
	ks := slices.Clone(keys)
	slices.Sort(ks)
	ks = slices.Compact(ks)
	switch {
	case len(ks) == 0:
		return target{}, errors.New("quorum: no key")
	case ks[0] == "": // sorts first
		return target{}, errors.New("quorum: empty key")
	case slices.Contains(ks, BootMarkerKey):
		return target{}, fmt.Errorf("quorum: key %q is reserved for the restart marker", BootMarkerKey)
	}
	t := target{name: strings.Join(ks, ","), keys: ks, boxed: make([]any, len(ks))}
	for i, k := range ks {
		t.boxed[i] = k
	}
	return t, nil
}

func (r request) overlaps(o request) bool {
	return slices.ContainsFunc(r.keys, func(k string) bool { return slices.Contains(o.keys, k) })
}
