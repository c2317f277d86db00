package placement

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/orders/request"
	"github.com/quorumlock/quorumlock/orders/store"
)

// batchRecorder is a batch function for a combiner: it records each batch
// (the keys of its orders and whether it was sold out), holds the first
// one until released, and reports product "42" sold out.
type batchRecorder struct {
	mu      sync.Mutex
	batches [][]string
	soldOut []bool
	started chan struct{}
	release chan struct{}
}

func (b *batchRecorder) run(_ context.Context, _ string, batch []*ticket, soldOut bool) ([]Result, []string) {
	keys := make([]string, len(batch))
	out := make([]Result, len(batch))
	for i, t := range batch {
		keys[i] = t.order.Req.IdempotencyKey.String()
		out[i].Log.Result = "placed " + keys[i]
	}
	b.mu.Lock()
	first := len(b.batches) == 0
	b.batches, b.soldOut = append(b.batches, keys), append(b.soldOut, soldOut)
	b.mu.Unlock()
	if first {
		close(b.started)
		<-b.release
	}
	return out, []string{"42"}
}

func orderOf(key string) Order {
	return Order{Req: store.OrderRequest{IdempotencyKey: request.MustKey(key)},
		Lines: []request.Line{{ProductID: "42", Quantity: 1}}}
}

// The combiner runs the batch function it was given: the first request
// leads a batch of one; those that arrive meanwhile wait in arrival order
// and are placed in one batch, up to the batch limit, which is told that
// the product was found sold out by the batch before.
func TestCombinerRunsTheBatchFunctionItIsGiven(t *testing.T) {
	rec := &batchRecorder{started: make(chan struct{}), release: make(chan struct{})}
	var waiting atomic.Int64
	queued := make(chan struct{}, 4) // one per request that joined a queue
	c := newCombiner(combinerConfig{
		run:      rec.run,
		unplaced: func(result, _ string) Result { return Result{Log: Log{Result: result}} },
		waiting: func(d int) {
			waiting.Add(int64(d))
			if d > 0 {
				queued <- struct{}{}
			}
		},
		batchLimit: 2, queueLimit: 10, queueWait: 10 * time.Second, soldOutFor: time.Minute,
	})
	results := make(chan string, 4)
	join := func(key string) {
		go func() { results <- c.join(context.Background(), "42", orderOf(key)).Log.Result }()
	}
	join("k0")
	<-queued
	<-rec.started
	for i := 1; i <= 3; i++ {
		join(fmt.Sprintf("k%d", i))
		<-queued // in arrival order: each joins once the one before it waits
		if n := c.queued("42"); n != i {
			t.Fatalf("%d queued, want %d", n, i)
		}
	}
	close(rec.release)
	got := map[string]bool{}
	for range 4 {
		got[<-results] = true
	}
	for i := range 4 {
		if k := fmt.Sprintf("placed k%d", i); !got[k] {
			t.Errorf("no %q among %v", k, got)
		}
	}
	want := [][]string{{"k0"}, {"k1", "k2"}, {"k3"}}
	if fmt.Sprint(rec.batches) != fmt.Sprint(want) {
		t.Errorf("batches %v, want %v", rec.batches, want)
	}
	if fmt.Sprint(rec.soldOut) != "[false true true]" {
		t.Errorf("sold out %v, want the batches after the first told", rec.soldOut)
	}
	if n, w := c.queued("42"), waiting.Load(); n != 0 || w != 0 {
		t.Errorf("%d still queued, gauge %d", n, w)
	}
}
