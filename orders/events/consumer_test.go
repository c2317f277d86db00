package events_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/orders/events"
)

// ship is the effect of the tests' exact consumers: one shipment row per
// event handled, with no constraint of its own, so a double shows.
func ship(by string) events.TxHandler {
	return func(ctx context.Context, tx pgx.Tx, ev events.Event) error {
		o, err := ev.Order()
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO shipments (order_id, event_id, product_id, quantity, reserved_by)
VALUES ($1, $2, $3, $4, $5)`, o.OrderID, ev.ID, o.ProductID, o.Quantity, by)
		return err
	}
}

func (e *env) exact(t *testing.T, group, name string, h events.TxHandler, opts ...events.Option) *events.Consumer {
	t.Helper()
	c, err := events.NewExact(e.rdb, e.pool, group, name, h,
		append([]events.Option{events.WithStream(e.stream), events.WithBlock(50 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Setup(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	return c
}

// duplicate adds another copy of every entry of the stream, as a relay
// that crashed before marking would.
func (e *env) duplicate(t *testing.T) {
	t.Helper()
	ctx := ctxT(t, time.Minute)
	msgs, err := e.rdb.XRange(ctx, e.stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if err := e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: e.stream, Values: m.Values}).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// pollUntil polls c until cond holds, a bounded number of rounds.
func pollUntil(t *testing.T, what string, cond func() bool, cs ...*events.Consumer) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		for _, c := range cs {
			if _, err := c.Poll(ctxT(t, time.Minute)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func (e *env) pending(t *testing.T, group string) int64 {
	t.Helper()
	p, err := e.rdb.XPending(ctxT(t, time.Minute), e.stream, group).Result()
	if err != nil {
		t.Fatal(err)
	}
	return p.Count
}

// Every event twice in the stream: one shipment each, every message
// acknowledged.
func TestExactAbsorbsDuplicates(t *testing.T) {
	e := newEnv(t)
	e.orders(t, 50)
	drain(t, e.relay(t, e.pool))
	e.duplicate(t)
	c := e.exact(t, "shipper", "c1", ship("c1"))
	pollUntil(t, "100 messages handled", func() bool {
		return e.count(t, `SELECT count(*) FROM consumed_events WHERE consumer_group = 'shipper'`) == 50 && e.pending(t, "shipper") == 0 &&
			e.count(t, `SELECT count(*) FROM shipments`) >= 50
	}, c)
	if n := e.count(t, `SELECT count(*) FROM (SELECT order_id FROM shipments GROUP BY order_id, product_id HAVING count(*) > 1) d`); n != 0 {
		t.Fatalf("%d orders shipped twice", n)
	}
	if n := e.count(t, `SELECT count(*) FROM shipments`); n != 50 {
		t.Fatalf("%d shipments, want 50", n)
	}
	st, err := c.Stats(ctxT(t, time.Minute))
	if err != nil || st.Pending != 0 || st.DedupSize != 50 {
		t.Fatalf("stats %+v, %v", st, err)
	}
}

// The Redis records gone (expired, evicted, a failover): the UNIQUE row
// still stops every repeat.
func TestExactWithoutTheRedisRecord(t *testing.T) {
	e := newEnv(t)
	e.orders(t, 20)
	drain(t, e.relay(t, e.pool))
	c := e.exact(t, "shipper", "c1", ship("c1"))
	pollUntil(t, "20 shipments", func() bool { return e.count(t, `SELECT count(*) FROM shipments`) == 20 && e.pending(t, "shipper") == 0 }, c)
	ctx := ctxT(t, time.Minute)
	keys, err := e.rdb.Keys(ctx, "consumed:{shipper}:*").Result()
	if err != nil || len(keys) != 20 {
		t.Fatalf("%d done records, %v; want 20", len(keys), err)
	}
	if err := e.rdb.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	e.duplicate(t) // 20 more copies, after the first 20 were acknowledged
	pollUntil(t, "the copies handled", func() bool { return e.pending(t, "shipper") == 0 && xlen(t, e) == 40 && lastDelivered(t, e, "shipper") }, c)
	if n := e.count(t, `SELECT count(*) FROM shipments`); n != 20 {
		t.Fatalf("%d shipments after the Redis records were lost, want 20", n)
	}
}

func xlen(t *testing.T, e *env) int64 {
	n, err := e.rdb.XLen(ctxT(t, time.Minute), e.stream).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// lastDelivered reports whether the group has read up to the stream's
// last entry.
func lastDelivered(t *testing.T, e *env, group string) bool {
	ctx := ctxT(t, time.Minute)
	gs, err := e.rdb.XInfoGroups(ctx, e.stream).Result()
	if err != nil {
		t.Fatal(err)
	}
	info, err := e.rdb.XInfoStream(ctx, e.stream).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gs {
		if g.Name == group {
			return g.LastDeliveredID == info.LastGeneratedID
		}
	}
	return false
}

// A handler that fails leaves the message pending and drops its claim; it
// is taken over after the claim idle time and processed once.
func TestExactRetriesAFailedHandler(t *testing.T) {
	e := newEnv(t)
	e.orders(t, 1)
	drain(t, e.relay(t, e.pool))
	var calls atomic.Int32
	h := func(ctx context.Context, tx pgx.Tx, ev events.Event) error {
		if calls.Add(1) == 1 {
			return errors.New("injected: the carrier is down")
		}
		return ship("c1")(ctx, tx, ev)
	}
	c := e.exact(t, "shipper", "c1", h, events.WithClaimIdle(300*time.Millisecond))
	pollUntil(t, "the first, failing, attempt", func() bool { return calls.Load() >= 1 }, c)
	if n := e.count(t, `SELECT count(*) FROM shipments`) + e.count(t, `SELECT count(*) FROM consumed_events`); n != 0 {
		t.Fatalf("the failed attempt left %d rows", n)
	}
	if p := e.pending(t, "shipper"); p != 1 {
		t.Fatalf("pending %d after the failure, want 1", p)
	}
	pollUntil(t, "the retry", func() bool { return e.pending(t, "shipper") == 0 }, c)
	if n := e.count(t, `SELECT count(*) FROM shipments`); n != 1 || calls.Load() != 2 {
		t.Fatalf("%d shipments after %d calls, want 1 after 2", n, calls.Load())
	}
}

// Two consumers race on claimed messages: one is slow, its messages go
// idle, the other takes them over with XAUTOCLAIM and finds the claim
// held; when the first finishes, each event has one shipment.
func TestExactConsumersRaceOnClaimedMessages(t *testing.T) {
	e := newEnv(t)
	e.orders(t, 5)
	drain(t, e.relay(t, e.pool))
	release := make(chan struct{})
	entered := make(chan struct{}, 5)
	slow := func(ctx context.Context, tx pgx.Tx, ev events.Event) error {
		entered <- struct{}{}
		<-release
		return ship("slow")(ctx, tx, ev)
	}
	opts := []events.Option{events.WithClaimIdle(200 * time.Millisecond), events.WithBatch(1)}
	c1 := e.exact(t, "shipper", "slow", slow, opts...)
	c2 := e.exact(t, "shipper", "fast", ship("fast"), opts...)
	done := make(chan error, 1)
	go func() { _, err := c1.Poll(context.Background()); done <- err }()
	<-entered // c1 holds the claim of the first event, inside its handler
	// c2 takes the other four, and the first once it has been idle long
	// enough: the claim turns it away.
	var takenOver atomic.Bool
	pollUntil(t, "c2 to handle the other events and meet the held claim", func() bool {
		owners, err := e.rdb.XPendingExt(ctxT(t, time.Minute), &redis.XPendingExtArgs{Stream: e.stream, Group: "shipper", Start: "-", End: "+", Count: 10}).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range owners {
			if p.Consumer == "fast" && p.RetryCount > 1 {
				takenOver.Store(true)
			}
		}
		return e.count(t, `SELECT count(*) FROM shipments`) == 4 && takenOver.Load()
	}, c2)
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	pollUntil(t, "nothing pending", func() bool { return e.pending(t, "shipper") == 0 }, c1, c2)
	if n := e.count(t, `SELECT count(*) FROM (SELECT order_id FROM shipments GROUP BY order_id, product_id HAVING count(*) > 1) d`); n != 0 {
		t.Fatalf("%d orders shipped twice", n)
	}
	if n := e.count(t, `SELECT count(*) FROM shipments`); n != 5 {
		t.Fatalf("%d shipments, want 5", n)
	}
}

// The negative control: without deduplication the duplicates ship twice,
// and the double-shipment query sees it.
func TestWithoutDedupDuplicatesShipTwice(t *testing.T) {
	e := newEnv(t)
	e.orders(t, 10)
	drain(t, e.relay(t, e.pool))
	e.duplicate(t)
	ctx := ctxT(t, time.Minute)
	msgs, err := e.rdb.XRange(ctx, e.stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs { // a consumer that trusts delivery
		o := fmt.Sprint(m.Values["order_id"])
		if _, err := e.pool.Exec(ctx, `INSERT INTO shipments (order_id, event_id, product_id, quantity, reserved_by) VALUES ($1, $2, '42', 1, 'naive')`, o, m.Values["event_id"]); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.count(t, `SELECT count(*) FROM (SELECT order_id FROM shipments GROUP BY order_id HAVING count(*) > 1) d`); n != 10 {
		t.Fatalf("the check saw %d doubles, want 10", n)
	}
}

// Approximate mode absorbs the duplicates it has seen, with either filter.
func TestApproximateAbsorbsDuplicates(t *testing.T) {
	for _, kind := range []string{"memory", "redis"} {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t)
			e.orders(t, 30)
			drain(t, e.relay(t, e.pool))
			e.duplicate(t)
			var f events.Filter
			var err error
			if kind == "memory" {
				f, err = events.NewMemoryFilter(1000, 0.001)
			} else {
				f, err = events.NewRedisFilter(e.rdb, 1000, 0.001, time.Hour)
			}
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			effects := map[string]int{}
			c, err := events.NewApproximate(e.rdb, f, "notify", "n1", func(_ context.Context, ev events.Event) error {
				mu.Lock()
				effects[ev.ID]++
				mu.Unlock()
				return nil
			}, events.WithStream(e.stream), events.WithBlock(50*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Setup(ctxT(t, time.Minute)); err != nil {
				t.Fatal(err)
			}
			pollUntil(t, "every message", func() bool { return e.pending(t, "notify") == 0 && lastDelivered(t, e, "notify") }, c)
			mu.Lock()
			defer mu.Unlock()
			total := 0
			for id, n := range effects {
				if n > 1 {
					t.Errorf("%s handled %d times", id, n)
				}
				total += n
			}
			// At 0.1% over 30 events a false positive is unlikely, but one
			// would skip an event, not double it.
			if total < 29 || total > 30 {
				t.Fatalf("%d events handled of 30", total)
			}
			if n, err := f.Count(ctxT(t, time.Minute), "notify"); err != nil || n < 28 || n > 32 {
				t.Fatalf("filter count %d, %v; want about 30", n, err)
			}
		})
	}
}

// A consumer restarted under the same name handles the messages its last
// run left pending (before any claim idle time passed), each once: a
// handler that keeps failing is tried once per run, not in a loop.
func TestRunHandlesItsOwnPendingOnce(t *testing.T) {
	e := newEnv(t)
	e.orders(t, 2)
	drain(t, e.relay(t, e.pool))
	fail := func(context.Context, pgx.Tx, events.Event) error { return errors.New("injected: down") }
	first := e.exact(t, "shipper", "c1", fail)
	pollUntil(t, "both messages delivered to c1", func() bool { return e.pending(t, "shipper") == 2 }, first)

	// A poison handler: Run tries each pending message once, then waits
	// for new ones; it does not spin on its history.
	var calls atomic.Int32
	poison := e.exact(t, "shipper", "c1", func(context.Context, pgx.Tx, events.Event) error {
		calls.Add(1)
		return errors.New("injected: still down")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	if err := poison.Run(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	if n := calls.Load(); n != 2 {
		t.Fatalf("the poison handler ran %d times in one run, want 2 (once per pending message)", n)
	}

	// Fixed: the next run ships both, from its history.
	good := e.exact(t, "shipper", "c1", ship("c1"))
	ctx, cancel = context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- good.Run(ctx) }()
	deadline := time.Now().Add(time.Minute)
	for e.count(t, `SELECT count(*) FROM shipments`) < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := e.count(t, `SELECT count(*) FROM shipments`); n != 2 || e.pending(t, "shipper") != 0 {
		t.Fatalf("%d shipments, %d pending; want 2 and 0", n, e.pending(t, "shipper"))
	}
}

// Pending messages whose entries MAXLEN trimmed away are lost to the
// group: the consumer that meets them says so in the log and the metrics,
// instead of dropping them silently.
func TestTrimmedPendingMessagesAreReported(t *testing.T) {
	e := newEnv(t)
	e.orders(t, 3)
	drain(t, e.relay(t, e.pool))
	fail := func(context.Context, pgx.Tx, events.Event) error { return errors.New("injected: down") }
	a := e.exact(t, "shipper", "a", fail)
	pollUntil(t, "three messages pending with a", func() bool { return e.pending(t, "shipper") == 3 }, a)
	if err := e.rdb.XTrimMaxLen(ctxT(t, time.Minute), e.stream, 0).Err(); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := events.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	b := e.exact(t, "shipper", "b", ship("b"), events.WithClaimIdle(100*time.Millisecond), events.WithMetrics(m))
	trimmed := func() float64 {
		return counter(t, reg, "events_consumed_total", map[string]string{"group": "shipper", "result": "trimmed"})
	}
	pollUntil(t, "the trimmed messages reported", func() bool { return trimmed() == 3 }, b)
	if p := e.pending(t, "shipper"); p != 0 {
		t.Fatalf("%d pending after the trim", p)
	}
}

// counter returns the value of the counter name with labels (0 when
// there is no such series).
func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, mt := range mf.GetMetric() {
			for _, lp := range mt.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			return mt.GetCounter().GetValue()
		}
	}
	return 0
}
