package quorum

import (
	"context"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Each node has two lanes, each with its own worker and connection: the
// main lane, and a fast lane for keys that other Lock calls of this Locker
// wait for, so that a hand-over does not wait for every other key's batch.
// Ordering rule: all of a lease's requests take its acquisition's lane, so
// its release never overtakes its SET.
const (
	mainLane = iota
	fastLane
	lanes
)

// nodeWorker sends one lane's requests to one node in order: requests that
// arrive while a batch is out leave together as the next batch, one
// pipeline, after the earlier ones returned or timed out. A long-lived
// goroutine also keeps its grown stack, where one per request would grow a
// new one through go-redis every time.
type nodeWorker struct {
	l    *Locker
	i    int // the node
	conn redis.UniversalClient
	kick chan struct{} // capacity 1: there is work

	mu    sync.Mutex
	queue []*call
	spare []*call // the previous batch's slice, reused

	// loaded is false until the node is known to have the scripts (and
	// again after a NOSCRIPT): a batch then loads them first, since a
	// pipelined EVALSHA cannot fall back to EVAL in order.
	loaded bool
}

// nodeLanes is one node's workers, one per lane.
type nodeLanes [lanes]*nodeWorker

func newNodeLanes(l *Locker, i int) *nodeLanes {
	var nl nodeLanes
	for k := range nl {
		nl[k] = &nodeWorker{l: l, i: i, conn: l.nodes[i].client, kick: make(chan struct{}, 1)}
		l.workersDone.Go(nl[k].loop)
	}
	return &nl
}

// submit queues c's request on its lane.
func (nl *nodeLanes) submit(c *call) {
	w := nl[mainLane]
	if c.req.fast {
		w = nl[fastLane]
	}
	w.mu.Lock()
	w.queue = append(w.queue, c)
	w.mu.Unlock()
	signal(w.kick)
}

func (w *nodeWorker) loop() {
	for {
		select {
		case <-w.kick:
		case <-w.l.stop:
			return
		}
		for w.sendQueued() {
		}
	}
}

// sendQueued sends what is queued as one batch; false when nothing was. A
// request whose deadline passed while it waited is not sent: its caller has
// stopped listening.
func (w *nodeWorker) sendQueued() bool {
	w.mu.Lock()
	batch := w.queue
	if len(batch) == 0 {
		w.mu.Unlock()
		return false
	}
	// Two slices take turns: the queue fills one while the other is out.
	w.queue, w.spare = w.spare[:0], nil
	w.mu.Unlock()
	live := batch[:0] // in place: it never overtakes the loop
	for _, c := range batch {
		if c.ctx.Err() != nil {
			c.deliver(w.i, 0, c.lateError(true))
		} else {
			live = append(live, c)
		}
	}
	switch len(live) {
	case 0:
	case 1:
		w.sendOne(live[0])
	default:
		w.sendBatch(live)
	}
	clear(batch)
	w.mu.Lock()
	w.spare = batch
	w.mu.Unlock()
	return true
}

// sendOne runs a lone request, which can fall back to EVAL in order.
func (w *nodeWorker) sendOne(c *call) {
	cmd := redis.NewCmd(c.ctx, c.req.args...)
	_ = w.conn.Process(c.ctx, cmd)
	v, err := cmd.Int64()
	if isNoScript(err) {
		cmd = redis.NewCmd(c.ctx, append([]any{"eval", scripts[c.req.op].src}, c.req.args[2:]...)...)
		_ = w.conn.Process(c.ctx, cmd)
		v, err = cmd.Int64()
	}
	c.deliver(w.i, v, c.nodeErr(err))
}

// sendBatch runs live as one pipeline under the latest of their deadlines.
// A request that found the node without its scripts (a restart) runs again
// once they are loaded, unless a later request of the batch on the same
// key did run: the second try would then land after it, out of order.
func (w *nodeWorker) sendBatch(live []*call) {
	deadline := live[0].req.deadline
	for _, c := range live[1:] {
		if c.req.deadline.After(deadline) {
			deadline = c.req.deadline
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if !w.loaded {
		w.loaded = w.load(ctx)
	}
	cmds := w.pipeline(ctx, live)
	var again []*call // to run again once the scripts are back
	for j, c := range live {
		v, err := cmds[j].Int64()
		if isNoScript(err) {
			w.loaded = false
			if !ranLater(live, cmds, j) {
				again = append(again, c)
				continue
			}
		}
		c.deliver(w.i, v, c.nodeErr(err))
	}
	if len(again) == 0 {
		return
	}
	w.loaded = w.load(ctx)
	for k, cmd := range w.pipeline(ctx, again) {
		v, err := cmd.Int64()
		again[k].deliver(w.i, v, again[k].nodeErr(err))
	}
}

// pipeline runs calls' requests as one pipeline and returns the commands.
func (w *nodeWorker) pipeline(ctx context.Context, calls []*call) []*redis.Cmd {
	pipe := w.conn.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for k, c := range calls {
		cmds[k] = redis.NewCmd(ctx, c.req.args...)
		_ = pipe.Process(ctx, cmds[k])
	}
	_, _ = pipe.Exec(ctx)
	return cmds
}

// ranLater reports whether a request after live[j] in the batch, on a
// key of its own, ran (did not fail with NOSCRIPT).
func ranLater(live []*call, cmds []*redis.Cmd, j int) bool {
	for k := j + 1; k < len(live); k++ {
		if live[k].req.overlaps(live[j].req) && !isNoScript(cmds[k].Err()) {
			return true
		}
	}
	return false
}

func isNoScript(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") }

// load makes sure the node has every script, so that a batch can use
// EVALSHA alone. It sends SCRIPT LOAD itself, not Script.Load: on a
// pipeline that would replace the script's hash with the empty answer.
func (w *nodeWorker) load(ctx context.Context) bool {
	pipe := w.conn.Pipeline()
	for _, s := range scripts[1:] {
		pipe.ScriptLoad(ctx, s.src)
	}
	_, err := pipe.Exec(ctx)
	return err == nil
}
