package watchdog_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/devtools/storetest"
	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/internal/syncbuf"
	"github.com/quorumlock/quorumlock/orders/request"
	"github.com/quorumlock/quorumlock/orders/store"
	"github.com/quorumlock/quorumlock/orders/watchdog"
)

// TestMain fails the package when a test leaves a goroutine behind: Run
// must not outlive its context.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// logBuffer collects a JSON log; safe for the watchdog's goroutine and the
// test's at once.
type logBuffer struct{ syncbuf.Buffer }

// records returns the log's records as decoded JSON objects.
func (b *logBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b.Bytes()))
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

// violationLogs returns the rows logged at Error for check, in order.
func (b *logBuffer) violationLogs(t *testing.T, check string) []string {
	t.Helper()
	var rows []string
	for _, r := range b.records(t) {
		if r["level"] == "ERROR" && r["check"] == check {
			row, _ := r["row"].(string)
			rows = append(rows, row)
		}
	}
	return rows
}

// count returns how many records have level and msg.
func (b *logBuffer) count(t *testing.T, level, msg string) int {
	t.Helper()
	n := 0
	for _, r := range b.records(t) {
		if r["level"] == level && r["msg"] == msg {
			n++
		}
	}
	return n
}

// dog is a watchdog on one database, with its registry and its log.
type dog struct {
	*watchdog.Watchdog
	reg *prometheus.Registry
	log *logBuffer
}

func newDog(t *testing.T, db store.Beginner, opts ...watchdog.Option) *dog {
	t.Helper()
	d := &dog{reg: prometheus.NewRegistry(), log: &logBuffer{}}
	logger := slog.New(slog.NewJSONHandler(d.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	w, err := watchdog.New(db, append([]watchdog.Option{watchdog.WithRegisterer(d.reg), watchdog.WithLogger(logger)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	d.Watchdog = w
	return d
}

// metricsAre compares the registry's watchdog metrics with counts (every
// check of watchdog.Checks present, those not named at 0, and no other)
// and the number of failed rounds. It reads the registry as a scrape
// would, through Gather. (prometheus/testutil would need a module that
// go.mod does not list.)
func (d *dog) metricsAre(counts map[string]int, failed int) error {
	mfs, err := d.reg.Gather()
	if err != nil {
		return err
	}
	got := map[string]float64{}
	gotFailed := -1.0
	for _, mf := range mfs {
		switch mf.GetName() {
		case "orders_invariant_violations":
			for _, m := range mf.GetMetric() {
				if l := m.GetLabel(); len(l) == 1 && l[0].GetName() == "check" {
					got[l[0].GetValue()] = m.GetGauge().GetValue()
				} else {
					return fmt.Errorf("orders_invariant_violations with labels %v", l)
				}
			}
		case "orders_invariant_check_errors_total":
			gotFailed = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	want := map[string]float64{}
	for _, c := range watchdog.Checks() {
		want[c] = float64(counts[c])
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || gotFailed != float64(failed) {
		return fmt.Errorf("orders_invariant_violations %v and %v failed rounds, want %v and %d", got, gotFailed, want, failed)
	}
	return nil
}

// wantMetrics fails unless metricsAre.
func (d *dog) wantMetrics(t *testing.T, counts map[string]int, failed int) {
	t.Helper()
	if err := d.metricsAre(counts, failed); err != nil {
		t.Fatal(err)
	}
}

// mustCheck runs one round that must succeed.
func (d *dog) mustCheck(t *testing.T) watchdog.Report {
	t.Helper()
	rep, err := d.CheckOnce(ctxT(t))
	if err != nil {
		t.Fatalf("CheckOnce: %v", err)
	}
	return rep
}

// shop is a healthy migrated database with real orders, placed and moved
// by the store: a CREATED order, a PAYING one (payment PENDING, just
// started), a PAID one and a CANCELLED one.
type shop struct {
	storetest.Env
	created, paying, paid store.Order
}

func (s *shop) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := s.Pool.Exec(ctxT(t), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func (s *shop) buy(t *testing.T, user, key, product string, qty int64) store.Order {
	t.Helper()
	id := "ord_" + strings.ReplaceAll(key, "-", "_")
	res, err := s.Store.PlaceCarts(ctxT(t), []store.Cart{{
		Order: store.OrderRequest{UserID: user, IdempotencyKey: request.MustKey(key), Fingerprint: fmt.Sprintf("fp-%s-%d", product, qty),
			Quantity: qty, OrderID: id},
		Lines: []store.CartLine{{ProductID: product, Quantity: qty, FenceKey: "stock:" + product}},
		Snapshot: func(o store.Outcome) store.Snapshot {
			if o.Kind == store.OutcomeOrder {
				return store.Snapshot{Status: http.StatusCreated, Body: []byte(`{}`)}
			}
			return store.Snapshot{Status: http.StatusConflict, Body: []byte(`{}`)}
		},
	}})
	if err == nil {
		err = res[0].Err
	}
	var out store.Outcome
	if len(res) > 0 {
		out = res[0].Outcome
	}
	if err != nil || out.Kind != store.OutcomeOrder {
		t.Fatalf("buy %s x%d: %+v, %v", product, qty, out, err)
	}
	return out.Order
}

func newShop(t *testing.T, pg *testbed.PostgresNode) *shop {
	t.Helper()
	ctx := ctxT(t)
	s := &shop{Env: storetest.New(t, pg)}
	for _, p := range []struct {
		id           string
		units, price int64
	}{{"42", 20, 250}, {"7", 3, 100}} {
		if err := s.Store.SeedProduct(ctx, p.id, p.units, p.price); err != nil {
			t.Fatal(err)
		}
	}
	s.created = s.buy(t, "u1", "k-created", "42", 2)
	s.paying = s.buy(t, "u2", "k-paying", "42", 1)
	if _, err := s.Store.BeginPayment(ctx, s.paying.ID, s.paying.ID+":pay"); err != nil {
		t.Fatal(err)
	}
	s.paid = s.buy(t, "u3", "k-paid", "7", 1)
	if _, err := s.Store.BeginPayment(ctx, s.paid.ID, s.paid.ID+":pay"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Store.SettlePayment(ctx, s.paid.ID+":pay", store.PaymentSucceeded, "ch_1"); err != nil {
		t.Fatal(err)
	}
	cancelled := s.buy(t, "u4", "k-cancelled", "42", 3)
	if _, err := s.Store.Cancel(ctx, cancelled.ID); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestWatchdog runs the checks on real databases: all five gauges at 0 on
// a healthy one, and exactly the broken check's gauge at its number of
// rows, logged row by row, when a test breaks an invariant by hand.
func TestWatchdog(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Postgres: true})
	pg := bed.Postgres
	t.Run("Healthy", func(t *testing.T) { testHealthy(t, pg) })
	t.Run("Broken", func(t *testing.T) { testBroken(t, pg) })
	t.Run("StuckPayingAge", func(t *testing.T) { testStuckPayingAge(t, pg) })
	t.Run("RunStopsWithItsContext", func(t *testing.T) { testRun(t, pg) })
	t.Run("FailedRoundKeepsTheGauges", func(t *testing.T) { testFailedRound(t, pg) })
}

func testHealthy(t *testing.T, pg *testbed.PostgresNode) {
	t.Parallel()
	s := newShop(t, pg)
	d := newDog(t, s.Pool)
	rep := d.mustCheck(t)
	if len(rep.Violations) != 0 {
		t.Fatalf("healthy database reports %q", rep.Violations)
	}
	d.wantMetrics(t, nil, 0)
	if n := d.log.count(t, "ERROR", "invariant violated"); n != 0 {
		t.Fatalf("%d violations logged on a healthy database", n)
	}
	if n := d.log.count(t, "DEBUG", "invariant checks passed"); n != 1 {
		t.Fatalf("the healthy round logged %d passes, want 1", n)
	}
}

// ageRE matches the age of an order PAYING since 2001.
var ageRE = regexp.MustCompile(` paying_for=[0-9]{6,}h[0-9]+m[0-9]+s `)

func testBroken(t *testing.T, pg *testbed.PostgresNode) {
	for _, c := range []struct {
		name  string
		check string
		spoil func(t *testing.T, s *shop)
		rows  func(s *shop) []string // the Detail of each violating row, in order
	}{
		{"NegativeStock", store.InvariantNonNegativeStock, func(t *testing.T, s *shop) {
			s.exec(t, `ALTER TABLE product_stock DROP CONSTRAINT product_stock_available_check`)
			// Only the sign is wrong: stocked moves with it, so the
			// balance holds.
			s.exec(t, `UPDATE product_stock SET available = -2, stocked = stocked - available - 2 WHERE product_id = '7'`)
		}, func(*shop) []string { return []string{"product_id=7 available=-2"} }},
		{"TwoOrdersForOneKey", store.InvariantOneOrderPerKey, func(t *testing.T, s *shop) {
			s.exec(t, `ALTER TABLE orders DROP CONSTRAINT orders_user_idempotency_unique`)
			s.exec(t, `INSERT INTO orders (order_id, user_id, product_id, quantity, amount_cents, idempotency_key,
    request_fingerprint, status, response_status, response_body, fence)
SELECT order_id || '_twin', user_id, product_id, quantity, amount_cents, idempotency_key,
    request_fingerprint, status, response_status, response_body, fence
FROM orders WHERE order_id = $1`, s.created.ID)
			s.exec(t, `INSERT INTO order_lines SELECT order_id || '_twin', product_id, quantity, amount_cents, fence
FROM order_lines WHERE order_id = $1`, s.created.ID)
			// Its stock was taken too, so only the key is wrong.
			s.exec(t, `UPDATE product_stock SET available = available - $2 WHERE product_id = $1`, s.created.ProductID, s.created.Quantity)
		}, func(s *shop) []string {
			return []string{fmt.Sprintf(`user_id=u1 idempotency_key=k-created orders=2 order_ids="%s, %s_twin"`, s.created.ID, s.created.ID)}
		}},
		{"StockMovedWithoutAnOrder", store.InvariantStockBalance, func(t *testing.T, s *shop) {
			// Two products: the gauge counts rows, not checks.
			s.exec(t, `UPDATE product_stock SET available = available + 1 WHERE product_id = '42'`)
			s.exec(t, `UPDATE product_stock SET available = available - 1 WHERE product_id = '7'`)
		}, func(*shop) []string {
			return []string{
				"product_id=42 stocked=20 available=18 held=3 difference=1",
				"product_id=7 stocked=3 available=1 held=1 difference=-1",
			}
		}},
		{"OrderLinesDisagree", store.InvariantOrderLinesAddUp, func(t *testing.T, s *shop) {
			s.exec(t, `UPDATE order_lines SET amount_cents = amount_cents + 1 WHERE order_id = $1`, s.created.ID)
		}, func(s *shop) []string {
			return []string{fmt.Sprintf(`order_id=%s product_id=42 quantity=2 amount_cents=%d line_units=2 line_amount=%d lines=1`,
				s.created.ID, s.created.AmountCents, s.created.AmountCents+1)}
		}},
		{"SecondSuccessfulCharge", store.InvariantOneChargePerPaymentRequest, func(t *testing.T, s *shop) {
			s.exec(t, `INSERT INTO payments (payment_request_id, order_id, amount_cents, status, provider_ref)
VALUES ($1 || ':pay-again', $1, $2, 'SUCCEEDED', 'ch_99')`, s.paid.ID, s.paid.AmountCents)
		}, func(s *shop) []string {
			return []string{fmt.Sprintf(`problem="several succeeded payments for one order" order_ids=%s payment_request_ids="%s:pay, %s:pay-again" provider_refs="ch_1, ch_99"`,
				s.paid.ID, s.paid.ID, s.paid.ID)}
		}},
		{"StuckPaying", watchdog.CheckStuckPaying, func(t *testing.T, s *shop) {
			s.exec(t, `UPDATE orders SET updated_at = TIMESTAMPTZ '2001-02-03 04:05:06Z' WHERE order_id = $1`, s.paying.ID)
		}, func(s *shop) []string {
			return []string{fmt.Sprintf(`order_id=%s user_id=u2 product_id=42 paying_since=2001-02-03T04:05:06Z paying_for=`, s.paying.ID)}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newShop(t, pg)
			d := newDog(t, s.Pool)
			d.mustCheck(t)
			d.wantMetrics(t, nil, 0)

			c.spoil(t, s)
			rep := d.mustCheck(t)
			want := c.rows(s)
			d.wantMetrics(t, map[string]int{c.check: len(want)}, 0)
			if rep.Count(c.check) != len(want) || len(rep.Violations) != len(want) {
				t.Fatalf("report %q, want %d rows of %s only", rep.Violations, len(want), c.check)
			}
			logged := d.log.violationLogs(t, c.check)
			if len(logged) != len(want) {
				t.Fatalf("logged %q for %s, want %q", logged, c.check, want)
			}
			for i, row := range logged {
				if rep.Violations[i].Detail != row {
					t.Errorf("logged row %q, reported %q", row, rep.Violations[i].Detail)
				}
				if c.check == watchdog.CheckStuckPaying {
					// The age is the database's clock minus 2001: only its
					// shape is known.
					pays := fmt.Sprintf(` payments="%s:pay PENDING"`, s.paying.ID)
					if !strings.HasPrefix(row, want[i]) || !strings.HasSuffix(row, pays) || !ageRE.MatchString(row) {
						t.Errorf("logged row %q, want %q...%q", row, want[i], pays)
					}
					continue
				}
				if row != want[i] {
					t.Errorf("logged row %q, want %q", row, want[i])
				}
			}
			if n := len(d.log.records(t)) - d.log.count(t, "DEBUG", "invariant checks passed"); n != len(want) {
				t.Errorf("%d other log records, want the %d violations only", n, len(want))
			}
		})
	}
}

// testStuckPayingAge: the age decides, by the database's clock, and the
// gauge falls back to 0 once the order is settled.
func testStuckPayingAge(t *testing.T, pg *testbed.PostgresNode) {
	t.Parallel()
	s := newShop(t, pg)
	ctx := ctxT(t)
	second := s.buy(t, "u5", "k-paying-2", "42", 1)
	if _, err := s.Store.BeginPayment(ctx, second.ID, second.ID+":pay"); err != nil {
		t.Fatal(err)
	}
	s.exec(t, `UPDATE orders SET updated_at = now() - interval '11 minutes' WHERE order_id = $1`, s.paying.ID)
	s.exec(t, `UPDATE orders SET updated_at = now() - interval '5 minutes' WHERE order_id = $1`, second.ID)
	// A recent reconciler attempt on the payment does not make the order
	// any younger.
	s.exec(t, `UPDATE payments SET updated_at = now() WHERE payment_request_id = $1`, s.paying.ID+":pay")

	byDefault := newDog(t, s.Pool) // 10 minutes
	byDefault.mustCheck(t)
	byDefault.wantMetrics(t, map[string]int{watchdog.CheckStuckPaying: 1}, 0)
	if rows := byDefault.log.violationLogs(t, watchdog.CheckStuckPaying); len(rows) != 1 || !strings.HasPrefix(rows[0], "order_id="+s.paying.ID+" ") || !strings.Contains(rows[0], " paying_for=11m") {
		t.Fatalf("logged %q, want the 11-minute order alone", rows)
	}

	strict := newDog(t, s.Pool, watchdog.WithStuckPayingAfter(time.Minute))
	rep := strict.mustCheck(t)
	strict.wantMetrics(t, map[string]int{watchdog.CheckStuckPaying: 2}, 0)
	if len(rep.Violations) != 2 || !strings.HasPrefix(rep.Violations[0].Detail, "order_id="+s.paying.ID+" ") ||
		!strings.HasPrefix(rep.Violations[1].Detail, "order_id="+second.ID+" ") {
		t.Fatalf("report %q, want both orders, oldest first", rep.Violations)
	}

	// Settled: the gauge is reset, not left at its last count.
	if _, err := s.Store.SettlePayment(ctx, s.paying.ID+":pay", store.PaymentSucceeded, "ch_7"); err != nil {
		t.Fatal(err)
	}
	byDefault.mustCheck(t)
	byDefault.wantMetrics(t, nil, 0)
}

// testRun: Run checks at once, then every interval, and returns
// context.Canceled promptly when its context is cancelled; no round runs
// after that (and TestMain's goleak finds no goroutine of it).
func testRun(t *testing.T, pg *testbed.PostgresNode) {
	t.Parallel()
	s := newShop(t, pg)
	s.exec(t, `UPDATE product_stock SET available = available + 1 WHERE product_id = '42'`)

	start := func(d *dog) (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		return func() {
			t.Helper()
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("Run returned %v, want context.Canceled", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return within 10s of its context's end")
			}
		}
	}
	waitFor := func(d *dog, counts map[string]int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			err := d.metricsAre(counts, 0)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("metrics never became %v: %v", counts, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// An hour's interval: the one round within the test is the first.
	hourly := newDog(t, s.Pool, watchdog.WithInterval(time.Hour))
	stop := start(hourly)
	waitFor(hourly, map[string]int{store.InvariantStockBalance: 1})
	stop()

	frequent := newDog(t, s.Pool, watchdog.WithInterval(20*time.Millisecond))
	stop = start(frequent)
	waitFor(frequent, map[string]int{store.InvariantStockBalance: 1})
	// Broken after the first round: a later round finds it.
	s.exec(t, `UPDATE product_stock SET available = available + 1 WHERE product_id = '7'`)
	waitFor(frequent, map[string]int{store.InvariantStockBalance: 2})
	stop()
	rounds := len(frequent.log.records(t))
	time.Sleep(100 * time.Millisecond) // five intervals
	if n := len(frequent.log.records(t)); n != rounds {
		t.Fatalf("%d log records after Run returned, %d before", n, rounds)
	}
	if n := frequent.log.count(t, "WARN", "invariant checks failed; orders_invariant_violations keeps its last values"); n != 0 {
		t.Fatalf("a stopped Run logged %d failed rounds", n)
	}

	// A context that has already ended runs no round.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	idle := newDog(t, s.Pool)
	if err := idle.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run on an ended context: %v", err)
	}
	if n := len(idle.log.records(t)); n != 0 {
		t.Fatalf("Run on an ended context logged %d records", n)
	}
}

// testFailedRound: a round that fails (a query failing midway, the
// database gone) counts in orders_invariant_check_errors_total, logs at
// Warn and leaves every gauge at the last successful round's value, even
// when the rows it saw before failing differ; a round the caller cancels
// is not a failure.
func testFailedRound(t *testing.T, pg *testbed.PostgresNode) {
	t.Parallel()
	s := newShop(t, pg)
	ctx := ctxT(t)
	pool, err := pgxpool.New(ctx, s.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	d := newDog(t, pool)
	s.exec(t, `UPDATE product_stock SET available = available + 1 WHERE product_id = '42'`)
	s.exec(t, `UPDATE orders SET updated_at = now() - interval '1 day' WHERE order_id = $1`, s.paying.ID)
	last := map[string]int{store.InvariantStockBalance: 1, watchdog.CheckStuckPaying: 1}
	d.mustCheck(t)
	d.wantMetrics(t, last, 0)
	const failed = "invariant checks failed; orders_invariant_violations keeps its last values"

	// Repaired, and a later check made to fail: the partial round sees a
	// balanced stock, and still the gauges stay.
	s.exec(t, `UPDATE product_stock SET available = available - 1 WHERE product_id = '42'`)
	s.exec(t, `ALTER TABLE payments RENAME TO payments_gone`)
	rep, err := d.CheckOnce(ctx)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42P01" {
		t.Fatalf("CheckOnce with a missing table: %v, want the driver's undefined_table error", err)
	}
	if len(rep.Violations) != 0 {
		t.Fatalf("partial report %q, want none", rep.Violations)
	}
	d.wantMetrics(t, last, 1)
	if n := d.log.count(t, "WARN", failed); n != 1 {
		t.Fatalf("%d Warn records of a failed round, want 1", n)
	}
	s.exec(t, `ALTER TABLE payments_gone RENAME TO payments`)

	// Cancelled by the caller: returned, not counted.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := d.CheckOnce(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("CheckOnce on a cancelled context: %v", err)
	}
	d.wantMetrics(t, last, 1)

	// The database gone, through Run too.
	pool.Close()
	if _, err := d.CheckOnce(ctx); err == nil {
		t.Fatal("CheckOnce on a closed pool succeeded")
	}
	d.wantMetrics(t, last, 2)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(rctx) }()
	deadline := time.Now().Add(20 * time.Second)
	for d.log.count(t, "WARN", failed) < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	d.wantMetrics(t, last, 3)
	for _, r := range d.log.records(t) {
		if r["level"] == "WARN" && (r["err"] == nil || r["err"] == "") {
			t.Errorf("Warn record without the error: %v", r)
		}
	}
}
