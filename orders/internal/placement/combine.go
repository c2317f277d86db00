package placement

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/orders/request"
)

// combiner queues the requests on this instance, in arrival order, and
// places them in batches across products: a batch takes the waiting
// requests in order, skipping those that touch a product of a batch still
// under way (and, after a skipped one, every later request for its
// products, so each product is served first come, first served), up to the
// batch limit and maxBatchKeys products. Up to lanes batches run at once,
// each led by its oldest request, which runs the batch function once and
// answers the others; when a batch ends, its leader starts the next ones.
//
// A product has company when a request for it arrives while another one
// waits or is being placed; it stays contended for hotFor after that. A
// batch holds either contended requests (a request is contended when one
// of its products is) or uncontended ones, never both, and each kind keeps
// a lane the other cannot take: a hot product's queue never waits behind
// a batch of quiet products, nor the other way round. The batch function
// is told which kind it runs (the placer takes the lock for contended
// batches) and which requests name only a product found sold out moments
// ago. Requests wait at most the queue wait, and at most the queue limit
// per product. The combiner knows nothing of what a batch does.
type combiner struct {
	combinerConfig
	mu      sync.Mutex
	pending []*ticket            // waiting requests, in arrival order
	count   map[string]int       // waiting requests per product
	busy    map[string]bool      // products of the batches under way
	hotAt   map[string]time.Time // when a product last had company
	soldAt  map[string]time.Time // when a transaction last found a product without stock
	running [2]int               // batches under way, by kind (0 quiet, 1 contended)
}

// combinerConfig is what a combiner runs and its bounds.
type combinerConfig struct {
	// run places one batch, led by the request whose context is ctx. It
	// returns one result per ticket, and the products the batch found
	// without stock.
	run func(ctx context.Context, b *batch) ([]Result, []string)
	// unplaced is the answer of a request that leaves without a batch.
	unplaced func(result, detail string) Result
	// waiting moves the gauge of the waiting requests; waited records how
	// long one waited for a batch of its kind.
	waiting                       func(d int)
	waited                        func(kind string, seconds float64)
	batchLimit, queueLimit, lanes int
	queueWait, soldOutFor, hotFor time.Duration
}

// batch is what one run of the batch function places.
type batch struct {
	tickets []*ticket
	// contended: the batch's requests have company (see combiner).
	contended bool
	// soldOut[i]: ticket i names one product, which a transaction found
	// without stock within the recheck bound.
	soldOut []bool
	// products are the products of the batch: busy until it ends.
	products []string
}

// ticket is one request in a queue.
type ticket struct {
	ctx    context.Context
	order  Order
	joined time.Time
	done   chan ticketEnd // capacity 1
	taken  bool           // in a batch: it waits for its result
}

// ticketEnd is what a ticket is told: its result, or to lead b.
type ticketEnd struct {
	res  Result
	lead *batch
}

// maxBatchKeys bounds the products of one batch: the keys of its lease.
const maxBatchKeys = 64

func newCombiner(c combinerConfig) *combiner {
	c.lanes = max(c.lanes, 2)
	return &combiner{combinerConfig: c, count: map[string]int{}, busy: map[string]bool{},
		hotAt: map[string]time.Time{}, soldAt: map[string]time.Time{}}
}

// join queues o and waits for its result: placed by this request as the
// leader of a batch, or by another one.
func (c *combiner) join(ctx context.Context, o Order) Result {
	t := &ticket{ctx: ctx, order: o, joined: time.Now(), done: make(chan ticketEnd, 1)}
	c.mu.Lock()
	for _, l := range o.Lines {
		if c.count[l.ProductID] >= c.queueLimit {
			c.mu.Unlock()
			return c.unplaced("shed", "too many requests wait for this product; retry")
		}
	}
	for _, l := range o.Lines {
		if c.count[l.ProductID] > 0 || c.busy[l.ProductID] {
			c.hotAt[l.ProductID] = t.joined
		}
		c.count[l.ProductID]++
	}
	c.pending = append(c.pending, t)
	c.waiting(1)
	starts, dropped := c.dispatch(t.joined)
	c.mu.Unlock()
	mine := c.start(starts, dropped, t)
	if mine != nil {
		return c.lead(mine, t)
	}
	return c.wait(t)
}

// wait waits for t's result, or for the lead, up to the queue wait; a
// request whose context ends or whose wait runs out while it is still
// queued leaves the queue and writes nothing.
func (c *combiner) wait(t *ticket) Result {
	timer := time.NewTimer(c.queueWait)
	defer timer.Stop()
	var gone Result
	select {
	case e := <-t.done:
		return c.ended(t, e)
	case <-t.ctx.Done():
		gone = c.unplaced("cancelled", "request cancelled or out of time")
	case <-timer.C:
		gone = c.unplaced("shed", "the product is busy; retry")
	}
	if c.leave(t) {
		return gone
	}
	return c.ended(t, <-t.done) // taken into a batch
}

// ended handles what t was told.
func (c *combiner) ended(t *ticket, e ticketEnd) Result {
	if e.lead != nil {
		return c.lead(e.lead, t)
	}
	return e.res
}

// leave takes t out of the queue unless a batch took it; it reports
// whether it did.
func (c *combiner) leave(t *ticket) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.taken {
		return false
	}
	for i, w := range c.pending {
		if w == t {
			c.pending = append(c.pending[:i], c.pending[i+1:]...)
			c.forget(t)
			return true
		}
	}
	return false
}

// forget takes t off the counts of the waiting requests; under mu.
func (c *combiner) forget(t *ticket) {
	for _, l := range t.order.Lines {
		if c.count[l.ProductID]--; c.count[l.ProductID] <= 0 {
			delete(c.count, l.ProductID)
		}
	}
	c.waiting(-1)
}

// lead places b, whose oldest request is me, starts the batches that can
// go once it ended, answers b's other requests and returns me's result.
func (c *combiner) lead(b *batch, me *ticket) Result {
	results, soldOut := c.run(me.ctx, b)
	now := time.Now()
	c.mu.Lock()
	c.running[kindOf(b.contended)]--
	for _, p := range b.products {
		delete(c.busy, p)
	}
	for _, p := range soldOut {
		c.soldAt[p] = now
	}
	starts, dropped := c.dispatch(now)
	c.mu.Unlock()
	var mine Result
	for i, t := range b.tickets {
		if t == me {
			mine = results[i]
			continue
		}
		t.done <- ticketEnd{res: results[i]}
	}
	c.start(starts, dropped, nil)
	return mine
}

// start tells the leaders of starts to lead and the dropped requests that
// they were cancelled; it returns the batch that me leads, if any.
func (c *combiner) start(starts []*batch, dropped []*ticket, me *ticket) *batch {
	for _, t := range dropped {
		t.done <- ticketEnd{res: c.unplaced("cancelled", "request cancelled or out of time")}
	}
	var mine *batch
	for _, b := range starts {
		if b.tickets[0] == me {
			mine = b
			continue
		}
		b.tickets[0].done <- ticketEnd{lead: b}
	}
	return mine
}

// kindName names a kind of batch: contended or quiet.
func kindName(contended bool) string {
	if contended {
		return "contended"
	}
	return "quiet"
}

// kindOf is the index of a kind of batch in running.
func kindOf(contended bool) int {
	if contended {
		return 1
	}
	return 0
}

// dispatch forms batches while a lane is free and a waiting request can
// go; under mu. It returns them, and the requests whose context ended
// while they waited.
func (c *combiner) dispatch(now time.Time) (starts []*batch, dropped []*ticket) {
	c.sweep(now)
	for c.running[0]+c.running[1] < c.lanes {
		b, gone := c.form(now)
		dropped = append(dropped, gone...)
		if b == nil {
			break
		}
		c.running[kindOf(b.contended)]++
		starts = append(starts, b)
	}
	return starts, dropped
}

// form takes the next batch off the waiting requests; under mu. It returns
// nil when none can go: every request waits for a product under way, or
// the lanes left are the other kind's.
func (c *combiner) form(now time.Time) (*batch, []*ticket) {
	var b *batch
	var dropped []*ticket
	blocked := map[string]bool{} // the products of the requests skipped, and b's
	kept := c.pending[:0]
	for _, t := range c.pending {
		switch {
		case t.ctx.Err() != nil:
			t.taken = true
			c.forget(t)
			dropped = append(dropped, t)
			continue
		case b == nil && c.canStart(t, blocked, now):
			b = &batch{contended: c.contended(t, now)}
			c.add(b, t, now)
			continue
		case b != nil && len(b.tickets) < c.batchLimit && c.fits(b, t, blocked, now):
			c.add(b, t, now)
			continue
		}
		for _, l := range t.order.Lines {
			blocked[l.ProductID] = true
		}
		kept = append(kept, t)
	}
	clear(c.pending[len(kept):])
	c.pending = kept
	return b, dropped
}

// canStart reports whether t can lead a new batch: none of its products is
// busy or blocked, and a lane is free for its kind (each kind keeps one).
func (c *combiner) canStart(t *ticket, blocked map[string]bool, now time.Time) bool {
	if c.touches(t, blocked, nil) {
		return false
	}
	other := 1 - kindOf(c.contended(t, now))
	return c.running[0]+c.running[1] < c.lanes-1 || c.running[other] > 0
}

// fits reports whether t can join b: same kind, none of its products busy
// in another batch or blocked, and few enough products in all.
func (c *combiner) fits(b *batch, t *ticket, blocked map[string]bool, now time.Time) bool {
	if c.touches(t, blocked, b) || c.contended(t, now) != b.contended {
		return false
	}
	n := len(b.products)
	for _, l := range t.order.Lines {
		if !slices.Contains(b.products, l.ProductID) {
			n++
		}
	}
	return n <= maxBatchKeys
}

// touches reports whether one of t's products is blocked, or busy in a
// batch other than b.
func (c *combiner) touches(t *ticket, blocked map[string]bool, b *batch) bool {
	for _, l := range t.order.Lines {
		if blocked[l.ProductID] || (c.busy[l.ProductID] && (b == nil || !slices.Contains(b.products, l.ProductID))) {
			return true
		}
	}
	return false
}

// add puts t into b and marks its products busy; under mu.
func (c *combiner) add(b *batch, t *ticket, now time.Time) {
	t.taken = true
	c.forget(t)
	c.waited(kindName(b.contended), now.Sub(t.joined).Seconds())
	b.tickets = append(b.tickets, t)
	for _, l := range t.order.Lines {
		if !c.busy[l.ProductID] {
			c.busy[l.ProductID] = true
			b.products = append(b.products, l.ProductID)
		}
	}
	b.soldOut = append(b.soldOut, len(t.order.Lines) == 1 && c.recently(c.soldAt, t.order.Lines[0].ProductID, c.soldOutFor, now))
}

// contended reports whether one of t's products had company within hotFor.
func (c *combiner) contended(t *ticket, now time.Time) bool {
	for _, l := range t.order.Lines {
		if c.recently(c.hotAt, l.ProductID, c.hotFor, now) {
			return true
		}
	}
	return false
}

// recently reports whether at[p] is within d of now.
func (c *combiner) recently(at map[string]time.Time, p string, d time.Duration, now time.Time) bool {
	t, ok := at[p]
	return ok && now.Sub(t) < d
}

// sweepAt is the size past which the marks are swept of old ones.
const sweepAt = 1024

// sweep forgets the marks that no longer count, once there are many; under
// mu.
func (c *combiner) sweep(now time.Time) {
	for _, m := range []struct {
		at map[string]time.Time
		d  time.Duration
	}{{c.hotAt, c.hotFor}, {c.soldAt, c.soldOutFor}} {
		if len(m.at) < sweepAt {
			continue
		}
		for p, t := range m.at {
			if now.Sub(t) >= m.d {
				delete(m.at, p)
			}
		}
	}
}

// restocked forgets that product was sold out: its stock came back here.
func (c *combiner) restocked(product string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.soldAt, product)
}

// queued returns how many requests wait for product: single-product orders
// for a product id, carts of several products for "".
func (c *combiner) queued(product string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.pending {
		if isCart(t.order.Lines) == (product == "") && (product == "" || t.order.Lines[0].ProductID == product) {
			n++
		}
	}
	return n
}

// isCart reports whether lines name several products.
func isCart(lines []request.Line) bool { return len(lines) > 1 }
