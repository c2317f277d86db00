package placement

import (
	"context"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/orders/request"
)

// combiner queues the requests on this instance and places them in
// batches: the request at the head of a queue leads, and runs the batch
// function once on every queued order (up to the batch limit), which
// places them in one transaction under one lease; then it hands the lead
// to the next request in the queue, if any, and answers. Orders are served
// in arrival order. Queues are bounded in length and in wait, and a queue
// disappears once empty. The combiner knows nothing of what a batch does:
// it runs the function it was given.
type combiner struct {
	combinerConfig
	mu     sync.Mutex
	queues map[string]*queue
}

// combinerConfig is what a combiner runs and its bounds.
type combinerConfig struct {
	// run places one batch of the queue named queue, led by the request
	// whose context is ctx; soldOut says that a transaction found the
	// queue's product without stock moments ago. It returns one result per
	// ticket, and the products the batch found without stock.
	run func(ctx context.Context, queue string, batch []*ticket, soldOut bool) ([]Result, []string)
	// unplaced is the answer of a request that leaves without a batch.
	unplaced func(result, detail string) Result
	// waiting moves the gauge of the waiting requests.
	waiting                func(d int)
	batchLimit, queueLimit int
	queueWait, soldOutFor  time.Duration
}

// queue is one product's waiting requests; under the combiner's mu.
type queue struct {
	product string
	waiting []*ticket
	leading bool      // a request is leading a batch of this product
	soldOut time.Time // when a transaction last found no stock (zero: none)
}

// ticket is one request in a queue.
type ticket struct {
	ctx    context.Context
	order  Order
	joined time.Time
	done   chan ticketEnd // capacity 1
	taken  bool           // in a batch: it waits for its result
	lead   bool           // told to lead: it must, it cannot just leave
}

// ticketEnd is what a ticket is told: its result, or to lead.
type ticketEnd struct {
	res  Result
	lead bool
}

func newCombiner(c combinerConfig) *combiner {
	return &combiner{combinerConfig: c, queues: map[string]*queue{}}
}

// cartQueue is the name of the queue of this instance's carts of several
// products: no product id can have it (ids are visible ASCII).
const cartQueue = "\x00carts"

// maxCartKeys bounds the products of one batch of carts: the keys of its
// lease.
const maxCartKeys = 64

// queueOf is the queue of an order of lines: its product's for one line,
// the carts' for several.
func queueOf(lines []request.Line) string {
	if len(lines) == 1 {
		return lines[0].ProductID
	}
	return cartQueue
}

// join queues o in queue product and waits for its result: placed by this
// request as the leader of a batch, or by another one.
func (c *combiner) join(ctx context.Context, product string, o Order) Result {
	t := &ticket{ctx: ctx, order: o, joined: time.Now(), done: make(chan ticketEnd, 1)}
	c.mu.Lock()
	q := c.queues[product]
	if q == nil {
		q = &queue{product: product}
		c.queues[product] = q
	}
	if len(q.waiting) >= c.queueLimit {
		c.mu.Unlock()
		return c.unplaced("shed", "too many requests wait for this product; retry")
	}
	q.waiting = append(q.waiting, t)
	c.waiting(1)
	lead := !q.leading
	q.leading = true
	c.mu.Unlock()
	if lead {
		return c.lead(q, t)
	}
	return c.wait(q, t)
}

// wait waits for t's result, or for the lead, up to the queue wait; a
// request whose context ends or whose wait runs out while it is still
// queued leaves the queue and writes nothing.
func (c *combiner) wait(q *queue, t *ticket) Result {
	timer := time.NewTimer(c.queueWait)
	defer timer.Stop()
	var gone Result
	select {
	case e := <-t.done:
		return c.ended(q, t, e)
	case <-t.ctx.Done():
		gone = c.unplaced("cancelled", "request cancelled or out of time")
	case <-timer.C:
		gone = c.unplaced("shed", "the product is busy; retry")
	}
	if c.leave(q, t) {
		return gone
	}
	return c.ended(q, t, <-t.done) // taken into a batch, or told to lead
}

// ended handles what t was told.
func (c *combiner) ended(q *queue, t *ticket, e ticketEnd) Result {
	if e.lead {
		return c.lead(q, t)
	}
	return e.res
}

// leave takes t out of the queue unless a batch took it or it was told
// to lead; it reports whether it did.
func (c *combiner) leave(q *queue, t *ticket) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.taken || t.lead {
		return false
	}
	for i, w := range q.waiting {
		if w == t {
			q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
			c.waiting(-1)
			return true
		}
	}
	return false
}

// lead places one batch of q, then hands the lead on and returns me's
// result.
func (c *combiner) lead(q *queue, me *ticket) Result {
	batch, dropped := c.take(q)
	for _, t := range dropped {
		t.done <- ticketEnd{res: c.unplaced("cancelled", "request cancelled or out of time")}
	}
	if len(batch) > 0 {
		results, soldOut := c.run(me.ctx, q.product, batch, c.isSoldOut(q))
		c.soldOut(soldOut)
		for i, t := range batch {
			t.done <- ticketEnd{res: results[i]}
		}
	}
	c.handOn(q)
	return (<-me.done).res
}

// take takes the next batch off q: up to the batch limit, first come
// first; tickets whose context has ended are dropped instead.
func (c *combiner) take(q *queue) (batch, dropped []*ticket) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	products := map[string]bool{} // a batch of carts: its lease's keys
	for n < len(q.waiting) && len(batch) < c.batchLimit {
		t := q.waiting[n]
		if len(batch) > 0 && !fits(products, t.order.Lines) {
			break
		}
		n++
		t.taken = true
		if t.ctx.Err() != nil {
			dropped = append(dropped, t)
			continue
		}
		for _, l := range t.order.Lines {
			products[l.ProductID] = true
		}
		batch = append(batch, t)
	}
	q.waiting = append(q.waiting[:0], q.waiting[n:]...)
	c.waiting(-n)
	return batch, dropped
}

// fits reports whether a cart's items add few enough products to a batch
// of carts.
func fits(products map[string]bool, items []request.Line) bool {
	n := len(products)
	for _, l := range items {
		if !products[l.ProductID] {
			n++
		}
	}
	return n <= maxCartKeys
}

// handOn tells the next waiting request to lead, or ends the lead and
// forgets an empty queue.
func (c *combiner) handOn(q *queue) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(q.waiting) == 0 {
		q.leading = false
		if q.soldOut.IsZero() || time.Since(q.soldOut) >= c.soldOutFor {
			delete(c.queues, q.product)
		}
		return
	}
	next := q.waiting[0]
	next.lead = true
	next.done <- ticketEnd{lead: true}
}

// isSoldOut reports whether a transaction found q's product without stock
// within the recheck bound.
func (c *combiner) isSoldOut(q *queue) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !q.soldOut.IsZero() && time.Since(q.soldOut) < c.soldOutFor
}

// soldOut notes that a transaction found products without stock.
func (c *combiner) soldOut(products []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range products {
		if q := c.queues[p]; q != nil {
			q.soldOut = time.Now()
		}
	}
}

// restocked forgets that product was sold out: its stock came back here.
func (c *combiner) restocked(product string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if q := c.queues[product]; q != nil {
		q.soldOut = time.Time{}
	}
}

// queued returns how many requests wait in the queue named product.
func (c *combiner) queued(product string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if q := c.queues[product]; q != nil {
		return len(q.waiting)
	}
	return 0
}
