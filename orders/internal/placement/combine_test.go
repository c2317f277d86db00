package placement

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/orders/request"
	"github.com/quorumlock/quorumlock/orders/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorded is one run of the batch function: the keys of its orders, its
// kind and its sold-out marks.
type recorded struct {
	keys      []string
	contended bool
	soldOut   []bool
}

func (r recorded) String() string {
	kind := "quiet"
	if r.contended {
		kind = "contended"
	}
	return kind + strings.Join(r.keys, ",")
}

// recorder is a batch function for a combiner: it records each batch and
// holds it until the test lets it go; products named in soldOut are
// reported sold out.
type recorder struct {
	mu      sync.Mutex
	batches []recorded
	started chan recorded
	release chan struct{}
	soldOut []string
}

func newRecorder() *recorder {
	return &recorder{started: make(chan recorded, 64), release: make(chan struct{}, 64)}
}

func (r *recorder) run(_ context.Context, b *batch) ([]Result, []string) {
	rec := recorded{contended: b.contended, soldOut: b.soldOut}
	out := make([]Result, len(b.tickets))
	for i, t := range b.tickets {
		rec.keys = append(rec.keys, t.order.Req.IdempotencyKey.String())
		out[i].Log.Result = "placed " + rec.keys[i]
	}
	r.mu.Lock()
	r.batches = append(r.batches, rec)
	r.mu.Unlock()
	r.started <- rec
	<-r.release
	return out, r.soldOut
}

// next waits for the next batch to start.
func (r *recorder) next(t *testing.T) recorded {
	t.Helper()
	select {
	case b := <-r.started:
		return b
	case <-time.After(10 * time.Second):
		t.Fatal("no batch started")
		return recorded{}
	}
}

// none checks that no batch starts while the requests settle.
func (r *recorder) none(t *testing.T, c *combiner, waiting int) {
	t.Helper()
	eventuallyQueued(t, c, waiting)
	select {
	case b := <-r.started:
		t.Fatalf("batch %v started", b)
	default:
	}
}

// rig is a combiner over a recorder, and the answers of its requests.
type rig struct {
	c       *combiner
	rec     *recorder
	waiting atomic.Int64
	answers chan string
}

func newCombinerRig(t *testing.T, lanes, batchLimit int) *rig {
	r := &rig{rec: newRecorder(), answers: make(chan string, 64)}
	r.c = newCombiner(combinerConfig{
		run:      r.rec.run,
		unplaced: func(result, _ string) Result { return Result{Log: Log{Result: result}} },
		waiting:  func(d int) { r.waiting.Add(int64(d)) },
		waited:   func(string, float64) {},
		lanes:    lanes, batchLimit: batchLimit, queueLimit: 3,
		queueWait: 10 * time.Second, soldOutFor: time.Minute, hotFor: time.Minute,
	})
	t.Cleanup(func() {
		if n := r.waiting.Load(); n != 0 {
			t.Errorf("gauge of waiting requests %d at the end", n)
		}
	})
	return r
}

// order is an order of one unit of each product, under key.
func order(key string, products ...string) Order {
	o := Order{Req: store.OrderRequest{IdempotencyKey: request.MustKey(key)}}
	for _, p := range products {
		o.Lines = append(o.Lines, request.Line{ProductID: p, Quantity: 1})
	}
	return o
}

// post sends a request and lets its answer come to r.answers.
func (r *rig) post(ctx context.Context, key string, products ...string) {
	go func() { r.answers <- r.c.join(ctx, order(key, products...)).Log.Result }()
}

// postWaiting sends a request and waits until it is in the queue, so that
// the queue holds the requests in the order they were posted.
func (r *rig) postWaiting(t *testing.T, key string, products ...string) {
	t.Helper()
	before := r.waiting.Load()
	r.post(context.Background(), key, products...)
	eventuallyQueued(t, r.c, int(before)+1)
}

// eventuallyQueued waits until n requests wait in c.
func eventuallyQueued(t *testing.T, c *combiner, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.mu.Lock()
		got := len(c.pending)
		c.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests wait, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// finish lets n batches go and collects n answers.
func (r *rig) finish(t *testing.T, batches, answers int) []string {
	t.Helper()
	for range batches {
		r.rec.release <- struct{}{}
	}
	var got []string
	for range answers {
		select {
		case a := <-r.answers:
			got = append(got, a)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d answers of %d", len(got), answers)
		}
	}
	slices.Sort(got)
	return got
}

// The first request of a product leads a quiet batch of one; those that
// arrive meanwhile have company: they wait in arrival order and are placed
// together, contended, up to the batch limit; a product that a batch found
// sold out marks the requests of the next ones.
func TestCombinerBatchesAProduct(t *testing.T) {
	r := newCombinerRig(t, 2, 2)
	r.rec.soldOut = []string{"42"}
	r.post(context.Background(), "k0", "42")
	if b := r.rec.next(t); b.String() != "quietk0" {
		t.Fatalf("first batch %v", b)
	}
	for i := 1; i <= 3; i++ {
		r.postWaiting(t, fmt.Sprint("k", i), "42")
	}
	r.rec.none(t, r.c, 3)
	r.rec.release <- struct{}{}
	if b := r.rec.next(t); b.String() != "contendedk1,k2" || fmt.Sprint(b.soldOut) != "[true true]" {
		t.Fatalf("second batch %v, sold out %v", b, b.soldOut)
	}
	r.rec.release <- struct{}{}
	if b := r.rec.next(t); b.String() != "contendedk3" {
		t.Fatalf("third batch %v", b)
	}
	got := r.finish(t, 1, 4)
	if fmt.Sprint(got) != "[placed k0 placed k1 placed k2 placed k3]" {
		t.Fatalf("answers %v", got)
	}
}

// Quiet orders for different products that wait while the lanes are taken
// are placed together in one batch, and a contended product's batch runs
// in the lane its kind keeps, beside them.
func TestCombinerCombinesAcrossProducts(t *testing.T) {
	r := newCombinerRig(t, 2, 10)
	r.post(context.Background(), "a", "1")
	r.rec.next(t)
	for _, p := range []string{"2", "3", "4"} {
		r.postWaiting(t, "k"+p, p)
	}
	r.postWaiting(t, "h1", "9")
	r.rec.none(t, r.c, 4) // the quiet kind's lane is taken; the other is kept
	r.post(context.Background(), "h2", "9")
	if b := r.rec.next(t); b.String() != "contendedh1,h2" {
		t.Fatalf("batch %v, want the product with company in the lane its kind keeps", b)
	}
	r.rec.none(t, r.c, 3)
	r.rec.release <- struct{}{} // one of the two batches ends
	if b := r.rec.next(t); b.String() != "quietk2,k3,k4" {
		t.Fatalf("batch %v, want the three quiet orders together", b)
	}
	if got := r.finish(t, 2, 6); len(got) != 6 {
		t.Fatalf("answers %v", got)
	}
}

// First come, first served per product: a request skipped because one of
// its products is busy holds back every later request for any of its
// products, even one that could go.
func TestCombinerServesEachProductInArrivalOrder(t *testing.T) {
	r := newCombinerRig(t, 4, 10)
	r.post(context.Background(), "a", "1")
	r.rec.next(t)
	r.postWaiting(t, "cart", "1", "2")     // waits for product 1
	r.postWaiting(t, "b", "2")             // must not overtake the cart on 2
	r.post(context.Background(), "c", "3") // free to go
	if b := r.rec.next(t); b.String() != "quietc" {
		t.Fatalf("batch %v, want c alone", b)
	}
	r.rec.none(t, r.c, 2)
	r.rec.release <- struct{}{}
	r.rec.release <- struct{}{}
	b := r.rec.next(t)
	if b.keys[0] != "cart" {
		t.Fatalf("batch %v: the cart must go first", b)
	}
	if len(b.keys) == 1 { // b has company on 2: the next batch
		r.rec.release <- struct{}{}
		b = r.rec.next(t)
		if b.keys[0] != "b" {
			t.Fatalf("batch %v", b)
		}
	}
	if got := r.finish(t, 1, 4); len(got) != 4 {
		t.Fatalf("answers %v", got)
	}
}

// A request past the queue limit of its product is shed at once; one
// whose context ends while it waits leaves and is never placed.
func TestCombinerShedsAndLetsGo(t *testing.T) {
	r := newCombinerRig(t, 2, 10)
	r.post(context.Background(), "a", "1")
	r.rec.next(t)
	for i := range 3 {
		r.postWaiting(t, fmt.Sprint("q", i), "1")
	}
	r.post(context.Background(), "over", "1")
	if a := <-r.answers; a != "shed" {
		t.Fatalf("past the limit: %q, want shed", a)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.post(ctx, "gone", "2") // quiet: its kind's lane is taken
	eventuallyQueued(t, r.c, 4)
	cancel()
	if a := <-r.answers; a != "cancelled" {
		t.Fatalf("cancelled while queued: %q", a)
	}
	eventuallyQueued(t, r.c, 3)
	r.rec.release <- struct{}{}
	if b := r.rec.next(t); b.String() != "contendedq0,q1,q2" {
		t.Fatalf("batch %v", b)
	}
	if got := r.finish(t, 1, 4); fmt.Sprint(got) != "[placed a placed q0 placed q1 placed q2]" {
		t.Fatalf("answers %v", got)
	}
}
