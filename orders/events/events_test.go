package events_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/devtools/storetest"
	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/orders/events"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := shared.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "the shared bed: close: %v\n", err)
		code = max(code, 1)
	}
	if code == 0 {
		// goleak's check of TestMain (VerifyTestMain), once the shared
		// bed is closed.
		err := goleak.Find(
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
			goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper"),
			goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		)
		if err != nil {
			fmt.Fprintf(os.Stderr, "goleak: Errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// shared is the bed (one Redis, Postgres) that the package's tests take in
// turn (newEnv); TestMain closes it.
var shared = bedtest.Shared{Options: testbed.Options{Redis: 1, Postgres: true}}

// env is the shared Redis (reset for the test: running, healed, empty) and
// a migrated orders database of the test's own with product 42.
type env struct {
	pool   *pgxpool.Pool
	rdb    *redis.Client
	stream string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	bed := shared.Take(t)
	db := storetest.New(t, bed.Postgres)
	if err := db.Store.SeedProduct(context.Background(), "42", 1_000_000, 100); err != nil {
		t.Fatal(err)
	}
	rdb := bedtest.RedisClients(t, bed)[0]
	return &env{pool: db.Pool, rdb: rdb, stream: "test:" + t.Name()}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// orders inserts n orders straight into the table (the trigger writes
// their order.created events) and returns their ids.
func (e *env) orders(t *testing.T, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("ord_%s_%d", t.Name(), i)
	}
	_, err := e.pool.Exec(ctxT(t, time.Minute), `INSERT INTO orders (order_id, user_id, product_id, quantity, amount_cents,
idempotency_key, request_fingerprint, status, response_status, response_body, fence)
SELECT id, 'u1', '42', 1, 100, id, 'fp', 'CREATED', 201, '\x7b7d', 1 FROM unnest($1::text[]) AS id`, ids)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func (e *env) relay(t *testing.T, db events.DB, opts ...events.Option) *events.Relay {
	t.Helper()
	r, err := events.NewRelay(db, e.rdb, append([]events.Option{events.WithStream(e.stream)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// drain publishes until the outbox is empty.
func drain(t *testing.T, r *events.Relay) int {
	t.Helper()
	total := 0
	for range 1000 {
		n, err := r.PublishOnce(ctxT(t, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return total
		}
		total += n
	}
	t.Fatal("the outbox never drained")
	return 0
}

// streamIDs returns the event id of every entry of the stream, in order.
func (e *env) streamIDs(t *testing.T) []string {
	t.Helper()
	msgs, err := e.rdb.XRange(ctxT(t, time.Minute), e.stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i], _ = m.Values["event_id"].(string)
	}
	return out
}

func (e *env) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(ctxT(t, time.Minute), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The trigger writes an event with each change that commits, and only
// those: created, paid, cancelled, not PAYING, nothing for a rollback.
func TestOutbox(t *testing.T) {
	e := newEnv(t)
	ids := e.orders(t, 2)
	ctx := ctxT(t, time.Minute)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := e.pool.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	exec(`UPDATE orders SET status = 'PAYING' WHERE order_id = $1`, ids[0])
	exec(`UPDATE orders SET status = 'PAID' WHERE order_id = $1`, ids[0])
	exec(`UPDATE orders SET status = 'PAID' WHERE order_id = $1`, ids[0]) // no change of state
	exec(`UPDATE orders SET status = 'CANCELLED' WHERE order_id = $1`, ids[1])
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE orders SET status = 'PAYING' WHERE order_id = $1`, ids[1]); err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback(ctx)

	rows, err := e.pool.Query(ctx, `SELECT event_id, type, payload->>'status' FROM order_events ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var id, typ, st string
		err := r.Scan(&id, &typ, &st)
		return id + " " + typ + " " + st, err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		ids[0] + "/order.created order.created CREATED",
		ids[1] + "/order.created order.created CREATED",
		ids[0] + "/order.paid order.paid PAID",
		ids[1] + "/order.cancelled order.cancelled CANCELLED",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events:\n got %q\nwant %q", got, want)
	}
}

// Two relays on one outbox publish every row exactly once, and mark every
// row sent.
func TestRelaysShareTheOutbox(t *testing.T) {
	e := newEnv(t)
	e.orders(t, 600)
	r1, r2 := e.relay(t, e.pool, events.WithBatch(50)), e.relay(t, e.pool, events.WithBatch(50))
	var wg sync.WaitGroup
	var total atomic.Int64
	for _, r := range []*events.Relay{r1, r2} {
		wg.Go(func() { total.Add(int64(drainQuiet(t, r))) })
	}
	wg.Wait()
	ids := e.streamIDs(t)
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("event %s published twice", id)
		}
		seen[id] = true
	}
	if len(ids) != 600 || total.Load() != 600 {
		t.Fatalf("%d entries, %d published; want 600", len(ids), total.Load())
	}
	if n := e.count(t, `SELECT count(*) FROM order_events WHERE sent_at IS NULL OR stream_id IS NULL`); n != 0 {
		t.Fatalf("%d rows not marked sent", n)
	}
	unsent, lag, err := r1.Lag(ctxT(t, time.Minute))
	if err != nil || unsent != 0 || lag != 0 {
		t.Fatalf("lag: %d %v %v", unsent, lag, err)
	}
}

// drainQuiet is drain for goroutines: errors end it early and are counted
// by the caller's checks.
func drainQuiet(t *testing.T, r *events.Relay) int {
	total := 0
	for range 1000 {
		n, err := r.PublishOnce(context.Background())
		if err != nil {
			t.Error(err)
			return total
		}
		if n == 0 {
			return total
		}
		total += n
	}
	return total
}

// failMark is a database whose transactions fail at "mark sent": the
// relay's crash after XADD and before the commit, in process.
type failMark struct{ *pgxpool.Pool }

func (f failMark) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := f.Pool.Begin(ctx)
	return failTx{tx}, err
}

type failTx struct{ pgx.Tx }

func (f failTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if !strings.Contains(sql, "SET sent_at") {
		return f.Tx.Exec(ctx, sql, args...)
	}
	return pgconn.CommandTag{}, errors.New("injected: the relay died before marking the rows sent")
}

// A relay that fails between XADD and marking leaves the rows unsent, and
// they go out again: the stream holds them twice, with the same event ids.
func TestRelayResendsAfterAFailedMark(t *testing.T) {
	e := newEnv(t)
	e.orders(t, 10)
	if _, err := e.relay(t, failMark{e.pool}).PublishOnce(ctxT(t, time.Minute)); err == nil {
		t.Fatal("the failing relay reported success")
	}
	if n := drain(t, e.relay(t, e.pool)); n != 10 {
		t.Fatalf("the second relay published %d, want 10", n)
	}
	ids := e.streamIDs(t)
	if len(ids) != 20 {
		t.Fatalf("%d entries, want 20 (every event twice)", len(ids))
	}
	for i := range 10 {
		if ids[i] != ids[i+10] {
			t.Fatalf("entry %d is %s, its copy %s", i, ids[i], ids[i+10])
		}
	}
}

// PurgeSent removes published rows older than the retention, in bounded
// batches, and never an unsent one.
func TestRelayPurgeSent(t *testing.T) {
	e := newEnv(t)
	ids := e.orders(t, 10)
	r := e.relay(t, e.pool)
	drain(t, r)
	ctx := ctxT(t, time.Minute)
	if _, err := e.pool.Exec(ctx, `UPDATE order_events SET sent_at = now() - interval '2 hours' WHERE order_id = ANY($1)`, ids[:6]); err != nil {
		t.Fatal(err)
	}
	// An unsent row, however old, stays.
	if _, err := e.pool.Exec(ctx, `UPDATE order_events SET sent_at = NULL, created_at = now() - interval '3 hours' WHERE order_id = $1`, ids[9]); err != nil {
		t.Fatal(err)
	}
	n, err := r.PurgeSent(ctx, time.Hour, 4)
	if err != nil || n != 4 {
		t.Fatalf("first batch: %d, %v; want 4", n, err)
	}
	if n, err = r.PurgeSent(ctx, time.Hour, 4); err != nil || n != 2 {
		t.Fatalf("second batch: %d, %v; want 2", n, err)
	}
	if left := e.count(t, `SELECT count(*) FROM order_events`); left != 4 {
		t.Fatalf("%d rows left, want 4 (three recent, one unsent)", left)
	}
	unsent, lag, err := r.Lag(ctx)
	if err != nil || unsent != 1 || lag < 3*time.Hour-time.Minute {
		t.Fatalf("lag: %d unsent, %v, %v; want 1, about 3h", unsent, lag, err)
	}
}
