package quorum

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Each node has two lanes, each with its own worker and connection: the
// main lane, and a fast lane for keys that other Lock calls of this Locker
// wait for, so a hand-over does not wait for other keys' batches. All of a
// lease's requests take its acquisition's lane: a release never overtakes its SET.
const (
	mainLane = iota
	fastLane
	lanes
)

// nodeWorker sends one lane's requests to one node in order: those that
// arrive while a batch is out leave together as the next, one pipeline. A
// long-lived goroutine keeps its grown stack (one per request would not).
type nodeWorker struct {
	l    *Locker
	i    int // the node
	conn redis.UniversalClient
	kick chan struct{} // capacity 1: there is work

	mu    sync.Mutex
	queue []*call
	spare []*call // the previous batch's slice, reused

	// loaded: the node is known to have the scripts; else a batch loads them
	// first, since a pipelined EVALSHA cannot fall back to EVAL in order.
	loaded bool
}

type nodeLanes [lanes]*nodeWorker

func newNodeLanes(l *Locker, i int) *nodeLanes {
	var nl nodeLanes
	for k := range nl {
		nl[k] = &nodeWorker{l: l, i: i, conn: l.nodes[i].client, kick: make(chan struct{}, 1)}
		l.workersDone.Go(nl[k].loop)
	}
	return &nl
}

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
// request whose deadline passed while it waited is not sent: no one listens.
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
	if len(live) == 1 {
		w.sendOne(live[0])
	} else if len(live) > 1 {
		w.sendBatch(live)
	}
	clear(batch)
	w.spare = batch // only this goroutine touches spare
	return true
}

// sendOne runs a lone request, which can fall back to EVAL in order.
func (w *nodeWorker) sendOne(c *call) {
	cmd := redis.NewCmd(&c.ctx, c.req.args...)
	_ = w.conn.Process(&c.ctx, cmd)
	if isNoScript(cmd.Err()) {
		cmd = redis.NewCmd(&c.ctx, append([]any{"eval", c.req.script.src}, c.req.args[2:]...)...)
		_ = w.conn.Process(&c.ctx, cmd)
	}
	w.answer(c, cmd)
}

// sendBatch runs live as one pipeline under the latest of their deadlines. A
// request that found the node without its scripts (a restart) runs again once
// they are loaded, unless a later one on its key ran: it would land out of order.
func (w *nodeWorker) sendBatch(live []*call) {
	last := slices.MaxFunc(live, func(a, b *call) int { return a.req.deadline.Compare(b.req.deadline) })
	ctx, cancel := context.WithDeadline(context.Background(), last.req.deadline)
	defer cancel()
	if !w.loaded {
		w.loaded = w.load(ctx)
	}
	cmds := w.pipeline(ctx, live)
	var again []*call // to run again once the scripts are back
	for j, c := range live {
		if isNoScript(cmds[j].Err()) {
			w.loaded = false
			if !ranLater(live, cmds, j) {
				again = append(again, c)
				continue
			}
		}
		w.answer(c, cmds[j])
	}
	if len(again) == 0 {
		return
	}
	w.loaded = w.load(ctx)
	for k, cmd := range w.pipeline(ctx, again) {
		w.answer(again[k], cmd)
	}
}

func (w *nodeWorker) answer(c *call, cmd *redis.Cmd) {
	v, err := cmd.Int64()
	c.deliver(w.i, v, c.nodeErr(err))
}

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

// ranLater reports whether a later request of the batch on a key of live[j]'s ran.
func ranLater(live []*call, cmds []*redis.Cmd, j int) bool {
	for k := j + 1; k < len(live); k++ {
		if live[k].req.overlaps(live[j].req) && !isNoScript(cmds[k].Err()) {
			return true
		}
	}
	return false
}

func isNoScript(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") }

// load sends SCRIPT LOAD for every script itself, not Script.Load: on a
// pipeline that would replace the script's hash with the empty answer.
func (w *nodeWorker) load(ctx context.Context) bool {
	pipe := w.conn.Pipeline()
	for _, s := range allScripts {
		pipe.ScriptLoad(ctx, s.src)
	}
	_, err := pipe.Exec(ctx)
	return err == nil
}
