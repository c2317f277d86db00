package events_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/devtools/storetest"
	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/orders/events"
)

// benchEnv is one bed for all the benchmarks: one Redis (appendfsync
// always, the bed's default, which the stream needs: the relay marks a row
// sent once its XADD is acknowledged) and a migrated database.
type benchEnv struct {
	pool *pgxpool.Pool
	rdb  *redis.Client
	seq  atomic.Int64 // makes every staged event id, stream and group unique
}

func newBenchEnv(b *testing.B) *benchEnv {
	b.Helper()
	bed := bedtest.Start(b, testbed.Options{Redis: 1, Postgres: true})
	db := storetest.New(b, bed.Postgres)
	return &benchEnv{pool: db.Pool, rdb: bedtest.RedisClients(b, bed)[0]}
}

// outbox inserts n unsent order.paid rows straight into the outbox (no
// orders rows: neither the relay nor the consumers read them) and returns
// the prefix of their order ids.
func (e *benchEnv) outbox(b *testing.B, n int) string {
	b.Helper()
	prefix := fmt.Sprintf("bench%d-", e.seq.Add(1))
	_, err := e.pool.Exec(context.Background(), `INSERT INTO order_events (event_id, order_id, type, payload)
SELECT $1 || i || '/order.paid', $1 || i, 'order.paid', jsonb_build_object('orderId', $1 || i, 'userId', 'u1',
  'productId', '42', 'quantity', 1, 'amountCents', 100, 'status', 'PAID')
FROM generate_series(1, $2::int) AS i`, prefix, n)
	if err != nil {
		b.Fatal(err)
	}
	return prefix
}

// stage puts n new order.paid events on a new stream with the relay and
// returns the stream's key.
func (e *benchEnv) stage(b *testing.B, n int) string {
	b.Helper()
	e.outbox(b, n)
	stream := fmt.Sprintf("bench:%d", e.seq.Add(1))
	r, err := events.NewRelay(e.pool, e.rdb, events.WithStream(stream), events.WithBatch(1000))
	if err != nil {
		b.Fatal(err)
	}
	for sent := 0; sent < n; {
		k, err := r.PublishOnce(context.Background())
		if err != nil || k == 0 {
			b.Fatalf("staging: %d of %d published, %v", sent, n, err)
		}
		sent += k
	}
	return stream
}

// consume polls c until it has handled n messages.
func consume(b *testing.B, c *events.Consumer, n int) {
	b.Helper()
	ctx := context.Background()
	for handled := 0; handled < n; {
		k, err := c.Poll(ctx)
		if err != nil {
			b.Fatal(err)
		}
		handled += k
	}
}

func (e *benchEnv) setup(b *testing.B, c *events.Consumer) {
	b.Helper()
	if err := c.Setup(context.Background()); err != nil {
		b.Fatal(err)
	}
}

func perSecond(b *testing.B, events int) {
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkEvents measures the relay and the consumers on the bed.
//
//   - Relay: one op is one PublishOnce of a batch of 100 rows, inserted
//     beforehand: the SELECT ... FOR UPDATE SKIP LOCKED, one pipelined
//     XADD round trip for the batch, the UPDATE marking the rows, the
//     commit.
//   - Exact: one op is one new event handled by one exact consumer: SET NX
//     claim, a transaction that inserts the consumed_events row and a
//     shipment, the done record, XACK.
//   - ExactRepeat: one op is one repeat of an event already done: the claim
//     finds the done record, XACK.
//   - Approximate/memory and /redis: one op is one new event through the
//     filter (test, a no-op handler, add) and XACK.
//
// The events are staged on a new stream with the timer stopped; the
// consumers read batches of 100 (the default).
func BenchmarkEvents(b *testing.B) {
	e := newBenchEnv(b)
	ctx := context.Background()

	b.Run("Relay", func(b *testing.B) {
		const batch = 100
		b.StopTimer()
		if _, err := e.pool.Exec(ctx, `TRUNCATE order_events`); err != nil {
			b.Fatal(err)
		}
		e.outbox(b, batch*b.N)
		r, err := events.NewRelay(e.pool, e.rdb, events.WithStream(fmt.Sprintf("bench:relay:%d", e.seq.Add(1))),
			events.WithBatch(batch), events.WithMaxLen(100_000))
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for range b.N {
			if n, err := r.PublishOnce(ctx); err != nil || n != batch {
				b.Fatalf("published %d, %v; want %d", n, err, batch)
			}
		}
		b.StopTimer()
		perSecond(b, batch*b.N)
	})

	b.Run("Exact", func(b *testing.B) {
		b.StopTimer()
		stream := e.stage(b, b.N)
		c, err := events.NewExact(e.rdb, e.pool, fmt.Sprintf("exact%d", e.seq.Add(1)), "c1", ship("bench"),
			events.WithStream(stream), events.WithBlock(10*time.Millisecond))
		if err != nil {
			b.Fatal(err)
		}
		e.setup(b, c)
		b.StartTimer()
		consume(b, c, b.N)
		b.StopTimer()
		perSecond(b, b.N)
	})

	b.Run("ExactRepeat", func(b *testing.B) {
		b.StopTimer()
		stream := e.stage(b, b.N)
		group := fmt.Sprintf("repeat%d", e.seq.Add(1))
		first, err := events.NewExact(e.rdb, e.pool, group, "c1", ship("bench"),
			events.WithStream(stream), events.WithBlock(10*time.Millisecond))
		if err != nil {
			b.Fatal(err)
		}
		e.setup(b, first)
		consume(b, first, b.N)
		// The same events again, on a stream of their own.
		msgs, err := e.rdb.XRange(ctx, stream, "-", "+").Result()
		if err != nil {
			b.Fatal(err)
		}
		again := stream + ":again"
		if _, err := e.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, m := range msgs {
				p.XAdd(ctx, &redis.XAddArgs{Stream: again, Values: m.Values})
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		c, err := events.NewExact(e.rdb, e.pool, group, "c1", ship("bench"),
			events.WithStream(again), events.WithBlock(10*time.Millisecond))
		if err != nil {
			b.Fatal(err)
		}
		e.setup(b, c)
		b.StartTimer()
		consume(b, c, b.N)
		b.StopTimer()
		perSecond(b, b.N)
	})

	b.Run("Approximate", func(b *testing.B) {
		for _, kind := range []string{"memory", "redis"} {
			b.Run(kind, func(b *testing.B) {
				b.StopTimer()
				stream := e.stage(b, b.N)
				var f events.Filter
				var err error
				if kind == "memory" {
					f, err = events.NewMemoryFilter(1_000_000, 0.01)
				} else {
					f, err = events.NewRedisFilter(e.rdb, 1_000_000, 0.01, time.Hour)
				}
				if err != nil {
					b.Fatal(err)
				}
				var handled atomic.Int64
				c, err := events.NewApproximate(e.rdb, f, fmt.Sprintf("approx%d", e.seq.Add(1)), "c1",
					func(context.Context, events.Event) error { handled.Add(1); return nil },
					events.WithStream(stream), events.WithBlock(10*time.Millisecond))
				if err != nil {
					b.Fatal(err)
				}
				e.setup(b, c)
				b.StartTimer()
				consume(b, c, b.N)
				b.StopTimer()
				perSecond(b, b.N)
			})
		}
	})
}
