package orders

import (
	"context"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/orders/request"
	"github.com/quorumlock/quorumlock/orders/store"
)

// combiner queues the requests for each product on this instance and
// places them in batches: the request at the head of a queue leads, takes
// the stock lock once, and places every queued order (up to the batch
// limit) in one transaction under that lease; then it hands the lead to
// the next request in the queue, if any, and answers. Orders are served in
// arrival order. Queues are bounded in length and in wait, and a queue
// disappears once empty.
type combiner struct {
	s      *Service
	mu     sync.Mutex
	queues map[string]*queue
	known  map[string]struct{} // products seen in Postgres (they are never deleted)
}

// maxKnown bounds the known products; past it the set starts again.
const maxKnown = 100_000

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
	req    store.OrderRequest
	items  []request.Line // a cart's lines (the carts' queue only)
	joined time.Time
	done   chan ticketEnd // capacity 1
	taken  bool           // in a batch: it waits for its result
	lead   bool           // told to lead: it must, it cannot just leave
}

// ticketEnd is what a ticket is told: its result, or to lead.
type ticketEnd struct {
	res  placed
	lead bool
}

func newCombiner(s *Service) *combiner {
	return &combiner{s: s, queues: map[string]*queue{}, known: map[string]struct{}{}}
}

// isKnown reports whether product was seen in Postgres.
func (c *combiner) isKnown(product string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.known[product]
	return ok
}

// learn notes that product exists.
func (c *combiner) learn(product string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.known) >= maxKnown {
		clear(c.known)
	}
	c.known[product] = struct{}{}
}

// cartQueue is the name of the queue of this instance's carts: no product
// id can have it (ids are visible ASCII).
const cartQueue = "\x00carts"

// maxCartKeys bounds the products of one batch of carts: the keys of its
// lease.
const maxCartKeys = 64

// join queues req (a cart's, with its items, in cartQueue) for product
// and waits for its result: placed by this request as the leader of a
// batch, or by another one.
func (c *combiner) join(ctx context.Context, product string, req store.OrderRequest, items []request.Line) placed {
	t := &ticket{ctx: ctx, req: req, items: items, joined: time.Now(), done: make(chan ticketEnd, 1)}
	c.mu.Lock()
	q := c.queues[product]
	if q == nil {
		q = &queue{product: product}
		c.queues[product] = q
	}
	if len(q.waiting) >= c.s.queueLimit {
		c.mu.Unlock()
		return c.s.unplaced(placeLog{result: "shed"}, "too many requests wait for this product; retry")
	}
	q.waiting = append(q.waiting, t)
	c.s.metrics.waiting(1)
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
func (c *combiner) wait(q *queue, t *ticket) placed {
	timer := time.NewTimer(c.s.queueWait)
	defer timer.Stop()
	var gone placed
	select {
	case e := <-t.done:
		return c.ended(q, t, e)
	case <-t.ctx.Done():
		gone = c.s.unplaced(placeLog{result: "cancelled"}, "request cancelled or out of time")
	case <-timer.C:
		gone = c.s.unplaced(placeLog{result: "shed"}, "the product is busy; retry")
	}
	if c.leave(q, t) {
		return gone
	}
	return c.ended(q, t, <-t.done) // taken into a batch, or told to lead
}

// ended handles what t was told.
func (c *combiner) ended(q *queue, t *ticket, e ticketEnd) placed {
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
			c.s.metrics.waiting(-1)
			return true
		}
	}
	return false
}

// lead places one batch of q, then hands the lead on and returns me's
// result.
func (c *combiner) lead(q *queue, me *ticket) placed {
	batch, dropped := c.take(q)
	for _, t := range dropped {
		t.done <- ticketEnd{res: c.s.unplaced(placeLog{result: "cancelled"}, "request cancelled or out of time")}
	}
	if len(batch) > 0 {
		results := c.s.runBatch(me.ctx, q.product, batch, c.isSoldOut(q))
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
	for n < len(q.waiting) && len(batch) < c.s.batchLimit {
		t := q.waiting[n]
		if len(batch) > 0 && !fits(products, t.items) {
			break
		}
		n++
		t.taken = true
		if t.ctx.Err() != nil {
			dropped = append(dropped, t)
			continue
		}
		for _, l := range t.items {
			products[l.ProductID] = true
		}
		batch = append(batch, t)
	}
	q.waiting = append(q.waiting[:0], q.waiting[n:]...)
	c.s.metrics.waiting(-n)
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
		if q.soldOut.IsZero() || time.Since(q.soldOut) >= c.s.soldOutFor {
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
	return !q.soldOut.IsZero() && time.Since(q.soldOut) < c.s.soldOutFor
}

// soldOut notes that a transaction found product without stock.
func (c *combiner) soldOut(product string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if q := c.queues[product]; q != nil {
		q.soldOut = time.Now()
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
