package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/orders/request"
	"github.com/quorumlock/quorumlock/orders/store"
)

// TestInvariants checks CheckInvariants on real databases: silent on a
// healthy one, and reporting exactly the invariant a test broke by hand.
func TestInvariants(t *testing.T) {
	srv := startPostgres(t)
	t.Run("HealthyAfterRealOrders", func(t *testing.T) { testInvariantsHealthy(t, srv) })
	t.Run("NegativeStock", func(t *testing.T) { testInvariantNegativeStock(t, srv) })
	t.Run("TwoOrdersForOneKey", func(t *testing.T) { testInvariantOneOrderPerKey(t, srv) })
	t.Run("StockMovedWithoutAnOrder", func(t *testing.T) { testInvariantStockBalance(t, srv) })
	t.Run("OrderLinesDisagree", func(t *testing.T) { testInvariantOrderLines(t, srv) })
	t.Run("BalanceCountsTheStatesThatHold", func(t *testing.T) { testInvariantHoldingStates(t, srv) })
	t.Run("SecondCharge", func(t *testing.T) { testInvariantOneCharge(t, srv) })
	t.Run("ReadsInAReadOnlyTransaction", func(t *testing.T) { testInvariantsReadOnly(t, srv) })
	t.Run("InsideTheCallersTransaction", func(t *testing.T) { testInvariantsInTx(t, srv) })
	t.Run("MigrationStocksExistingProducts", func(t *testing.T) { testInvariantsMigration(t, srv) })
	t.Run("Errors", func(t *testing.T) { testInvariantsErrors(t, srv) })
}

// shop is a database after a day of real orders, placed and moved through
// the store's own functions.
type shop struct {
	*env
	created   store.Order // CREATED, nothing else done
	paying    store.Order // PAYING, its payment PENDING
	paid      store.Order // PAID by the charge's reply, then an agreeing callback
	paidByEvt store.Order // PAID by a callback alone
}

// buy places one order for productID through PlaceOrder and returns its
// outcome and error.
func (e *env) buy(t *testing.T, user, key, productID string, qty int64) (store.Outcome, error) {
	t.Helper()
	return e.put(ctxT(t), placeOrder{
		UserID:         user,
		IdempotencyKey: request.MustKey(key),
		Fingerprint:    fmt.Sprintf("fp-%s-%d", productID, qty),
		ProductID:      productID,
		Quantity:       qty,
		Fence:          e.nextFence(t, productID),
	})
}

// mustBuy is buy for an order that must be created.
func (e *env) mustBuy(t *testing.T, user, key, productID string, qty int64) store.Order {
	t.Helper()
	out, err := e.buy(t, user, key, productID, qty)
	if err != nil || out.Kind != store.OutcomeOrder {
		t.Fatalf("buy %s x%d: %+v, %v", productID, qty, out, err)
	}
	return out.Order
}

// newShop fills a fresh database with orders in every state, payments of
// every outcome, out-of-stock answers, replays, an expiry and a reseed.
func newShop(t *testing.T, srv pgServer) *shop {
	t.Helper()
	ctx := ctxT(t)
	s := &shop{env: newEnv(t, srv)}
	s.seed(t, "42", 20, 250)
	s.seed(t, "7", 3, 100)
	s.seed(t, "9", 0, 999)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	s.created = s.mustBuy(t, "u1", "k-created", "42", 2)
	// A replay of the same request takes no stock.
	if out, err := s.buy(t, "u1", "k-created", "42", 2); err != nil || !out.Replayed || out.Order.ID != s.created.ID {
		t.Fatalf("replay: %+v, %v", out, err)
	}
	// Out of stock, saved and replayed.
	for range 2 {
		if _, err := s.buy(t, "u2", "k-none", "9", 1); !errors.Is(err, store.ErrOutOfStock) {
			t.Fatalf("product 9: %v", err)
		}
	}
	if _, err := s.buy(t, "u2", "k-short", "7", 4); !errors.Is(err, store.ErrOutOfStock) {
		t.Fatalf("product 7 x4: %v", err)
	}
	s.mustBuy(t, "u2", "k-seven", "7", 3)

	s.paying = s.mustBuy(t, "u3", "k-paying", "42", 1)
	if _, err := s.st.BeginPayment(ctx, s.paying.ID, s.paying.ID+":pay"); err != nil {
		t.Fatal(err)
	}

	s.paid = s.mustBuy(t, "u3", "k-paid", "42", 3)
	rid := s.paid.ID + ":pay"
	_, err := s.st.BeginPayment(ctx, s.paid.ID, rid)
	must(err)
	_, err = s.st.SettlePayment(ctx, rid, store.PaymentSucceeded, "ch_1")
	must(err)
	for range 2 { // the provider's callback, delivered twice
		_, _, err = s.st.ApplyPaymentEvent(ctx, store.PaymentEvent{EventID: "evt_1", RequestID: rid, Status: store.PaymentSucceeded, ProviderRef: "ch_1"})
		must(err)
	}

	s.paidByEvt = s.mustBuy(t, "u4", "k-paid-by-event", "42", 1)
	_, err = s.st.BeginPayment(ctx, s.paidByEvt.ID, s.paidByEvt.ID+":pay")
	must(err)
	_, _, err = s.st.ApplyPaymentEvent(ctx, store.PaymentEvent{EventID: "evt_2", RequestID: s.paidByEvt.ID + ":pay", Status: store.PaymentSucceeded, ProviderRef: "ch_2"})
	must(err)

	// Declined, then cancelled: its stock comes back.
	declined := s.mustBuy(t, "u5", "k-declined", "42", 2)
	_, err = s.st.BeginPayment(ctx, declined.ID, declined.ID+":pay")
	must(err)
	_, err = s.st.SettlePayment(ctx, declined.ID+":pay", store.PaymentFailed, "")
	must(err)
	_, err = s.st.Cancel(ctx, declined.ID)
	must(err)
	// Declined and left so.
	failed := s.mustBuy(t, "u5", "k-failed", "42", 1)
	_, err = s.st.BeginPayment(ctx, failed.ID, failed.ID+":pay")
	must(err)
	_, err = s.st.SettlePayment(ctx, failed.ID+":pay", store.PaymentFailed, "")
	must(err)

	// Cancelled twice by the user: restocked once.
	cancelled := s.mustBuy(t, "u6", "k-cancelled", "42", 1)
	for range 2 {
		_, err = s.st.Cancel(ctx, cancelled.ID)
		must(err)
	}
	// Left unpaid past the hold, expired.
	unpaid := s.mustBuy(t, "u7", "k-unpaid", "42", 2)
	_, err = s.pool.Exec(ctx, `UPDATE orders SET created_at = now() - interval '1 hour' WHERE order_id = $1`, unpaid.ID)
	must(err)
	expired, err := s.st.ExpireOrders(ctx, 15*time.Minute, 10)
	must(err)
	if len(expired) != 1 || expired[0].ID != unpaid.ID {
		t.Fatalf("expired %+v", expired)
	}

	// Restocked while orders hold its units, then sold again.
	s.seed(t, "42", 30, 250)
	s.mustBuy(t, "u8", "k-after-reseed", "42", 5)
	s.seed(t, "7", 1, 100)

	var states int
	must(s.pool.QueryRow(ctx, `SELECT count(DISTINCT status) FROM orders`).Scan(&states))
	if states != len(allStatuses) {
		t.Fatalf("the shop has orders in %d states, want all %d", states, len(allStatuses))
	}
	return s
}

// check runs CheckInvariants on e's pool.
func (e *env) check(t *testing.T) []store.Violation {
	t.Helper()
	vs, err := store.CheckInvariants(ctxT(t), e.pool)
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

// exec runs statements that break the database on purpose.
func (e *env) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := e.pool.Exec(ctxT(t), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// onlyViolation fails unless vs is exactly one violation, of invariant,
// whose detail satisfies ok.
func onlyViolation(t *testing.T, vs []store.Violation, invariant string, ok func(detail string) bool) {
	t.Helper()
	if len(vs) != 1 || vs[0].Invariant != invariant || !ok(vs[0].Detail) {
		t.Fatalf("violations %q, want one of %s", vs, invariant)
	}
}

func contains(sub ...string) func(string) bool {
	return func(d string) bool {
		for _, s := range sub {
			if !strings.Contains(d, s) {
				return false
			}
		}
		return true
	}
}

func testInvariantsHealthy(t *testing.T, srv pgServer) {
	t.Parallel()
	s := newShop(t, srv)
	if vs := s.check(t); len(vs) != 0 {
		t.Fatalf("healthy database reports %q", vs)
	}
	// An empty database is healthy too.
	if vs := newEnv(t, srv).check(t); len(vs) != 0 {
		t.Fatalf("empty database reports %q", vs)
	}
}

func testInvariantNegativeStock(t *testing.T, srv pgServer) {
	t.Parallel()
	s := newShop(t, srv)
	s.exec(t, `ALTER TABLE product_stock DROP CONSTRAINT product_stock_available_check`)
	// Units taken out by hand, counted in stocked: only the sign is wrong.
	s.exec(t, `UPDATE product_stock SET available = -2, stocked = stocked - available - 2 WHERE product_id = '7'`)
	onlyViolation(t, s.check(t), store.InvariantNonNegativeStock, func(d string) bool { return d == "product_id=7 available=-2" })
}

func testInvariantOneOrderPerKey(t *testing.T, srv pgServer) {
	t.Parallel()
	s := newShop(t, srv)
	o := s.created
	// The request sold twice, stock taken twice, in a database without the
	// constraint.
	s.exec(t, `ALTER TABLE orders DROP CONSTRAINT orders_user_idempotency_unique`)
	s.exec(t, `INSERT INTO orders (order_id, user_id, product_id, quantity, amount_cents, idempotency_key,
    request_fingerprint, status, response_status, response_body, fence)
SELECT order_id || '-twin', user_id, product_id, quantity, amount_cents, idempotency_key,
    request_fingerprint, status, response_status, response_body, fence
FROM orders WHERE order_id = $1`, o.ID)
	s.exec(t, `INSERT INTO order_lines SELECT order_id || '-twin', product_id, quantity, amount_cents, fence
FROM order_lines WHERE order_id = $1`, o.ID)
	s.exec(t, `UPDATE product_stock SET available = available - $2 WHERE product_id = $1`, o.ProductID, o.Quantity)
	want := fmt.Sprintf(`user_id=%s idempotency_key=%s orders=2 order_ids="%s, %s-twin"`, o.UserID, o.IdempotencyKey, o.ID, o.ID)
	onlyViolation(t, s.check(t), store.InvariantOneOrderPerKey, func(d string) bool { return d == want })
}

func testInvariantStockBalance(t *testing.T, srv pgServer) {
	for _, c := range []struct {
		name  string
		spoil func(t *testing.T, s *shop)
		diff  int64
	}{
		{"UnitsAddedByHand", func(t *testing.T, s *shop) {
			s.exec(t, `UPDATE product_stock SET available = available + 1 WHERE product_id = '42'`)
		}, 1},
		{"OrderDeleted", func(t *testing.T, s *shop) {
			s.exec(t, `DELETE FROM order_lines WHERE order_id = $1`, s.created.ID)
			s.exec(t, `DELETE FROM orders WHERE order_id = $1`, s.created.ID)
		}, -2},
		{"CancelledWithoutRestock", func(t *testing.T, s *shop) {
			s.exec(t, `UPDATE orders SET status = 'CANCELLED' WHERE order_id = $1`, s.created.ID)
		}, -2},
		{"PaidOrderRestocked", func(t *testing.T, s *shop) {
			s.exec(t, `UPDATE product_stock SET available = available + $2 WHERE product_id = $1`, s.paid.ProductID, s.paid.Quantity)
		}, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newShop(t, srv)
			c.spoil(t, s)
			onlyViolation(t, s.check(t), store.InvariantStockBalance,
				func(d string) bool {
					return strings.HasPrefix(d, "product_id=42 ") && strings.HasSuffix(d, fmt.Sprintf(" difference=%d", c.diff))
				})
		})
	}
}

// testInvariantHoldingStates ties the balance query to Status.Holds: for
// every state, an order moved there by hand with the stock accounted as
// Holds says keeps the balance, and the opposite accounting breaks it.
func testInvariantHoldingStates(t *testing.T, srv pgServer) {
	t.Parallel()
	e := newEnv(t, srv)
	want := map[string]bool{}
	for _, st := range allStatuses {
		for _, right := range []bool{true, false} {
			product := fmt.Sprintf("%s-%v", strings.ToLower(string(st)), right)
			e.seed(t, product, 10, 100)
			o := e.mustBuy(t, "u1", "k-"+product, product, 3)
			e.exec(t, `UPDATE orders SET status = $2 WHERE order_id = $1`, o.ID, st)
			if st.Holds() != right { // the units come back
				e.exec(t, `UPDATE product_stock SET available = available + 3 WHERE product_id = $1`, product)
			}
			if !right {
				want[product] = true
			}
		}
	}
	got := map[string]bool{}
	for _, v := range e.check(t) {
		product, _, _ := strings.Cut(strings.TrimPrefix(v.Detail, "product_id="), " ")
		if v.Invariant != store.InvariantStockBalance || got[product] {
			t.Errorf("unexpected violation %v", v)
		}
		got[product] = true
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("unbalanced products %v, want %v", got, want)
	}
}

func testInvariantOneCharge(t *testing.T, srv pgServer) {
	for _, c := range []struct {
		name    string
		spoil   func(t *testing.T, s *shop)
		problem string
		subject func(s *shop) string
	}{
		{"SecondSucceededPaymentOfAnOrder", func(t *testing.T, s *shop) {
			s.exec(t, `INSERT INTO payments (payment_request_id, order_id, amount_cents, status, provider_ref)
VALUES ($1 || ':pay-again', $1, $2, 'SUCCEEDED', 'ch_99')`, s.paid.ID, s.paid.AmountCents)
		}, "several succeeded payments for one order", func(s *shop) string {
			return fmt.Sprintf(`order_ids=%s payment_request_ids="%s:pay, %s:pay-again" provider_refs="ch_1, ch_99"`, s.paid.ID, s.paid.ID, s.paid.ID)
		}},
		{"SecondChargeReportedByTheProvider", func(t *testing.T, s *shop) {
			s.exec(t, `INSERT INTO payment_events (event_id, payment_request_id, status, provider_ref)
VALUES ('evt_99', $1 || ':pay', 'SUCCEEDED', 'ch_99')`, s.paidByEvt.ID)
		}, "several provider references for one payment request", func(s *shop) string {
			return fmt.Sprintf(`order_ids=%s payment_request_ids=%s:pay provider_refs="ch_2, ch_99"`, s.paidByEvt.ID, s.paidByEvt.ID)
		}},
		{"PaymentRequestRecordedTwice", func(t *testing.T, s *shop) {
			s.exec(t, `ALTER TABLE payments DROP CONSTRAINT payments_pkey CASCADE`)
			s.exec(t, `INSERT INTO payments SELECT * FROM payments WHERE order_id = $1`, s.paying.ID)
		}, "several payments rows for one payment request", func(s *shop) string {
			return fmt.Sprintf(`order_ids=%s payment_request_ids=%s:pay provider_refs=NULL`, s.paying.ID, s.paying.ID)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newShop(t, srv)
			c.spoil(t, s)
			want := fmt.Sprintf("problem=%q %s", c.problem, c.subject(s))
			onlyViolation(t, s.check(t), store.InvariantOneChargePerPaymentRequest, func(d string) bool { return d == want })
		})
	}
}

// spyDB hands out transactions that note, before every query, whether
// the transaction is read-only, and whether they were committed.
type spyDB struct {
	pool      *pgxpool.Pool
	queries   int
	writable  int
	committed bool
}

func (d *spyDB) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := d.pool.Begin(ctx)
	return &spyTx{Tx: tx, db: d}, err
}

type spyTx struct {
	pgx.Tx
	db *spyDB
}

func (tx *spyTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	var ro string
	if err := tx.Tx.QueryRow(ctx, `SHOW transaction_read_only`).Scan(&ro); err != nil {
		return nil, err
	}
	tx.db.queries++
	if ro != "on" {
		tx.db.writable++
	}
	return tx.Tx.Query(ctx, sql, args...)
}

func (tx *spyTx) Commit(ctx context.Context) error {
	tx.db.committed = true
	return tx.Tx.Commit(ctx)
}

func testInvariantsReadOnly(t *testing.T, srv pgServer) {
	t.Parallel()
	s := newShop(t, srv)
	spy := &spyDB{pool: s.pool}
	vs, err := store.CheckInvariants(ctxT(t), spy)
	if err != nil || len(vs) != 0 {
		t.Fatalf("%q, %v", vs, err)
	}
	if spy.queries != 5 || spy.writable != 0 || spy.committed {
		t.Fatalf("%d queries, %d of them in a writable transaction, committed %v; want 5 read-only, rolled back",
			spy.queries, spy.writable, spy.committed)
	}
}

func testInvariantsInTx(t *testing.T, srv pgServer) {
	t.Parallel()
	s := newShop(t, srv)
	ctx := ctxT(t)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	// The checks see the caller's uncommitted write...
	if _, err := tx.Exec(ctx, `UPDATE product_stock SET available = available + 1 WHERE product_id = '7'`); err != nil {
		t.Fatal(err)
	}
	vs, err := store.CheckInvariants(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	onlyViolation(t, vs, store.InvariantStockBalance, contains("product_id=7 ", " difference=1"))
	// ...and leave the transaction writable.
	if _, err := tx.Exec(ctx, `UPDATE product_stock SET available = available - 1 WHERE product_id = '7'`); err != nil {
		t.Fatalf("the caller's transaction after CheckInvariants: %v", err)
	}
	if vs, err := store.CheckInvariants(ctx, tx); err != nil || len(vs) != 0 {
		t.Fatalf("after the repair: %q, %v", vs, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if vs := s.check(t); len(vs) != 0 {
		t.Fatalf("after commit: %q", vs)
	}
}

// testInvariantsMigration fills a database at the schema before
// product_stock.stocked, migrates it, and expects each product's stocked
// to be its balance at that moment.
func testInvariantsMigration(t *testing.T, srv pgServer) {
	t.Parallel()
	ctx := ctxT(t)
	dsn := bedtest.NewDatabase(t, srv)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, store.Migrations(), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 3); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO product_stock (product_id, available, price_cents) VALUES ('a', 5, 100), ('b', 0, 100), ('c', 4, 100)`,
		`INSERT INTO orders (order_id, user_id, product_id, quantity, amount_cents, idempotency_key,
    request_fingerprint, status, response_status, response_body, fence)
VALUES ('o1', 'u', 'a', 2, 200, 'k1', 'f', 'CREATED', 201, '', 1),
       ('o2', 'u', 'a', 3, 300, 'k2', 'f', 'PAID', 201, '', 2),
       ('o3', 'u', 'a', 7, 700, 'k3', 'f', 'CANCELLED', 201, '', 3),
       ('o4', 'u', 'b', 1, 100, 'k4', 'f', 'PAYMENT_FAILED', 201, '', 1)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := store.MigrateDSN(ctx, dsn); err != nil || v < 4 {
		t.Fatalf("migrate: version %d, %v", v, err)
	}
	rows, err := db.QueryContext(ctx, `SELECT product_id || '=' || stocked FROM product_stock ORDER BY product_id`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := "[a=10 b=1 c=4]"; fmt.Sprint(got) != want {
		t.Fatalf("stocked %v, want %s", got, want)
	}

	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	st, err := store.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	// A reseed after the migration keeps the balance.
	if err := st.SeedProduct(ctx, "a", 8, 100); err != nil {
		t.Fatal(err)
	}
	if vs, err := store.CheckInvariants(ctx, pool); err != nil || len(vs) != 0 {
		t.Fatalf("migrated database: %q, %v", vs, err)
	}
}

func testInvariantsErrors(t *testing.T, srv pgServer) {
	t.Parallel()
	if _, err := store.CheckInvariants(context.Background(), nil); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("nil database: %v", err)
	}
	e := newEnv(t, srv)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := store.CheckInvariants(ctx, e.pool); !errors.Is(err, context.Canceled) {
		t.Fatalf("ended context: %v", err)
	}
	// A database without the schema: the error is the driver's, wrapped.
	bare, err := pgxpool.New(context.Background(), bedtest.NewDatabase(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	_, err = store.CheckInvariants(ctxT(t), bare)
	var pgErr interface{ SQLState() string }
	if !errors.As(err, &pgErr) || pgErr.SQLState() != "42P01" || !strings.Contains(err.Error(), store.InvariantNonNegativeStock) {
		t.Fatalf("unmigrated database: %v", err)
	}
}

// An order whose lines disagree with it is caught; each spoiling leaves
// the stock balanced, so only this invariant speaks.
func testInvariantOrderLines(t *testing.T, srv pgServer) {
	for _, c := range []struct {
		name, sql string
	}{
		{"AmountOffByOne", `UPDATE order_lines SET amount_cents = amount_cents + 1 WHERE order_id = $1`},
		{"ProductForgotten", `UPDATE orders SET product_id = NULL WHERE order_id = $1`},
		{"ProductChanged", `UPDATE orders SET product_id = '7' WHERE order_id = $1`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newShop(t, srv)
			s.exec(t, c.sql, s.created.ID)
			onlyViolation(t, s.check(t), store.InvariantOrderLinesAddUp,
				func(d string) bool { return strings.HasPrefix(d, "order_id="+s.created.ID+" ") })
		})
	}
}
