package quorum

import (
	"context"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// nodeWorker sends one node's requests, in the order they were submitted.
// A request that arrives while a batch is out waits for it and leaves with
// the others that arrived meanwhile, as one pipeline: one write and one
// read for all of them, however many lockers are at work. The order has a
// use beyond speed: a request leaves only after every earlier request to
// the node has returned (or timed out), so a release never overtakes the
// same lease's late SET on that node.
//
// The worker is a long-lived goroutine: it keeps its grown stack, where a
// goroutine per request would grow a new one through go-redis every time.
type nodeWorker struct {
	l    *Locker
	i    int
	conn nodeConn

	mu    sync.Mutex
	queue []*call
	spare []*call // the previous batch's slice, reused

	kick chan struct{} // capacity 1: there is work
	stop chan struct{} // closed by Close once every request has ended
	done chan struct{} // closed when the goroutine returns

	// loaded is false until the node is known to have the scripts (and
	// again after a NOSCRIPT): a batch then loads them first, since a
	// pipelined EVALSHA cannot fall back to EVAL in order.
	loaded bool
}

// nodeConn is what a worker needs of a node's client.
type nodeConn interface {
	Process(ctx context.Context, cmd redis.Cmder) error
	Pipeline() redis.Pipeliner
}

func newNodeWorker(l *Locker, i int) *nodeWorker {
	w := &nodeWorker{l: l, i: i, conn: l.nodes[i].client,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go w.loop()
	return w
}

// submit queues c's request to this node.
func (w *nodeWorker) submit(c *call) {
	w.mu.Lock()
	w.queue = append(w.queue, c)
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

func (w *nodeWorker) loop() {
	defer close(w.done)
	for {
		select {
		case <-w.kick:
		case <-w.stop:
			return
		}
		for {
			w.mu.Lock()
			batch := w.queue
			if len(batch) == 0 {
				w.mu.Unlock()
				break
			}
			// Two slices take turns: the queue fills one while the other
			// is out as a batch.
			w.queue, w.spare = w.spare[:0], nil
			w.mu.Unlock()
			w.send(batch)
			clear(batch)
			w.mu.Lock()
			w.spare = batch
			w.mu.Unlock()
		}
	}
}

// send runs a batch and delivers every answer.
func (w *nodeWorker) send(batch []*call) {
	// A request whose deadline passed while it waited is not sent: the
	// caller has stopped listening, and the node never sees it.
	live := batch[:0] // in place: it never overtakes the loop
	for _, c := range batch {
		if c.ctx.Err() != nil {
			c.deliver(w.i, 0, c.unsentError())
			continue
		}
		live = append(live, c)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		c := live[0]
		cmd := redis.NewCmd(c.ctx, c.cmdArgs...)
		_ = w.conn.Process(c.ctx, cmd)
		v, err := cmd.Int64()
		if isNoScript(err) {
			// Alone, the request can fall back to EVAL in order.
			cmd = redis.NewCmd(c.ctx, c.script.evalArgs(c.cmdArgs)...)
			_ = w.conn.Process(c.ctx, cmd)
			v, err = cmd.Int64()
		}
		c.deliver(w.i, v, c.nodeErr(err))
		return
	}
	deadline := live[0].deadline
	for _, c := range live[1:] {
		if c.deadline.After(deadline) {
			deadline = c.deadline
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if !w.loaded {
		w.loaded = w.load(ctx)
	}
	pipe := w.conn.Pipeline()
	cmds := make([]*redis.Cmd, len(live))
	for j, c := range live {
		cmds[j] = redis.NewCmd(ctx, c.cmdArgs...)
		_ = pipe.Process(ctx, cmds[j])
	}
	_, _ = pipe.Exec(ctx)
	var again []int // requests to run again once the scripts are back
	for j, c := range live {
		v, err := cmds[j].Int64()
		if err != nil && isNoScript(err) {
			// The node lost its scripts (a restart): this request did not
			// run. Run it again after loading them, unless a later request
			// of the batch on the same key did run: the second try would
			// then land after it, out of order.
			w.loaded = false
			if !ranLater(live, cmds, j) {
				again = append(again, j)
				continue
			}
		}
		c.deliver(w.i, v, c.nodeErr(err))
	}
	if len(again) == 0 {
		return
	}
	w.loaded = w.load(ctx)
	pipe = w.conn.Pipeline()
	for _, j := range again {
		cmds[j] = redis.NewCmd(ctx, live[j].cmdArgs...)
		_ = pipe.Process(ctx, cmds[j])
	}
	_, _ = pipe.Exec(ctx)
	for _, j := range again {
		v, err := cmds[j].Int64()
		live[j].deliver(w.i, v, live[j].nodeErr(err))
	}
}

// ranLater reports whether a request after live[j] in the batch, on the
// same key, ran (did not fail with NOSCRIPT).
func ranLater(live []*call, cmds []*redis.Cmd, j int) bool {
	for k := j + 1; k < len(live); k++ {
		if live[k].key == live[j].key && !isNoScript(cmds[k].Err()) {
			return true
		}
	}
	return false
}

func isNoScript(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") }

// load makes sure the node has every script, so that a batch can use
// EVALSHA alone.
func (w *nodeWorker) load(ctx context.Context) bool {
	pipe := w.conn.Pipeline()
	// SCRIPT LOAD itself, not Script.Load: on a pipeline that would
	// replace the script's hash with the still empty answer.
	for _, src := range []string{acquireSrc, releaseSrc, extendSrc} {
		pipe.ScriptLoad(ctx, src)
	}
	_, err := pipe.Exec(ctx)
	return err == nil
}

// nodeErr maps an error of c's request: one cut off by the call's own
// deadline (or the client's socket timeout), not by the caller, is a node
// timeout; the caller's context error stays the caller's.
func (c *call) nodeErr(err error) error {
	if err != nil && ctxErr(c.parent) == nil && isTimeout(c, err) {
		return errNodeTimeout(err)
	}
	return err
}

// unsentError is the error of a request dropped before it left.
func (c *call) unsentError() error {
	if err := ctxErr(c.parent); err != nil {
		return err
	}
	return errNodeTimeout(errUnsent)
}

// closeWorkers stops the workers once every request has ended (l.bg is
// done) and waits for them.
func (l *Locker) closeWorkers() {
	for _, w := range l.workers {
		close(w.stop)
	}
	for _, w := range l.workers {
		<-w.done
	}
}
