package store

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quorumlock/quorumlock/fencing"
	"github.com/quorumlock/quorumlock/internal/failpoint"
	"github.com/quorumlock/quorumlock/internal/option"
	"github.com/quorumlock/quorumlock/orders/request"
)

// Limits on the inputs the store accepts, besides the order path's own
// (request.MaxUserIDLen for user ids, request.MaxIDLen for product ids,
// request.MaxQuantity for quantities, and the idempotency key, which comes
// checked as a request.Key). Longer values are rejected with [ErrInvalid]
// before anything is written.
const (
	// MaxRefLen bounds the ids the server or a payment provider makes:
	// order ids, payment request ids, event ids and provider references.
	MaxRefLen = 255
	// MaxFingerprintLen bounds request fingerprints, in bytes.
	MaxFingerprintLen = 256
)

var (
	// ErrInvalid reports bad input (an empty id, a quantity out of range, a
	// fence that is not positive, ...). Nothing is written.
	ErrInvalid = errors.New("store: invalid input")

	// ErrNotFound reports that the order, product, payment or saved outcome
	// does not exist.
	ErrNotFound = errors.New("store: not found")

	// ErrUnknownProduct reports an order for a product that has no stock
	// row. Nothing is written.
	ErrUnknownProduct = errors.New("store: unknown product")

	// ErrOutOfStock reports that the product had fewer units than asked
	// for. PlaceCarts returns it together with the saved 409 outcome.
	ErrOutOfStock = errors.New("store: out of stock")

	// ErrFingerprintMismatch reports an idempotency key reused for a
	// different request. Nothing is written.
	ErrFingerprintMismatch = errors.New("store: idempotency key reused with a different request")

	// ErrStaleFence reports a placement whose fence is not above the last
	// fence the product's stock row accepted: the caller's lease was
	// superseded. Nothing is written. It is the same value as
	// fencing.ErrStaleFence, so either matches with errors.Is.
	ErrStaleFence = fencing.ErrStaleFence

	// ErrInvalidTransition reports a state change the order's current state
	// forbids. The error is a [*TransitionError] carrying that state.
	ErrInvalidTransition = errors.New("store: invalid order state transition")
)

// Status is an order's state.
type Status string

// Order states. See the package documentation for the allowed moves.
const (
	StatusCreated       Status = "CREATED"
	StatusPaying        Status = "PAYING"
	StatusPaid          Status = "PAID"
	StatusPaymentFailed Status = "PAYMENT_FAILED"
	StatusCancelled     Status = "CANCELLED"
)

// Valid reports whether s is one of the order states.
func (s Status) Valid() bool {
	switch s {
	case StatusCreated, StatusPaying, StatusPaid, StatusPaymentFailed, StatusCancelled:
		return true
	}
	return false
}

// Final reports whether no move leaves s. (PAYMENT_FAILED is not final:
// cancelling it returns its stock.)
func (s Status) Final() bool {
	return s == StatusPaid || s == StatusCancelled
}

// Holds reports whether an order in state s holds its quantity out of
// stock: every state but CANCELLED. The stock balance is
// sum(available) + sum(quantity of orders that hold) = the stock put in.
func (s Status) Holds() bool { return s.Valid() && s != StatusCancelled }

// CanTransition reports whether the state machine has an edge from -> to.
func CanTransition(from, to Status) bool {
	for _, s := range sources(to) {
		if s == from {
			return true
		}
	}
	return false
}

// sources returns the states that may move to to; none for a target no
// edge reaches.
func sources(to Status) []Status {
	switch to {
	case StatusPaying:
		return []Status{StatusCreated}
	case StatusCancelled:
		return []Status{StatusCreated, StatusPaymentFailed}
	case StatusPaid, StatusPaymentFailed:
		return []Status{StatusPaying}
	}
	return nil
}

// Order is one row of the orders table.
type Order struct {
	ID     string
	UserID string
	// ProductID is the product of a one-line order, "" for a cart.
	ProductID string
	// Quantity is the units of every line.
	Quantity       int64
	AmountCents    int64
	IdempotencyKey string
	// Fingerprint is the request fingerprint the order was placed with.
	Fingerprint string
	Status      Status
	// Fence is the fencing token the stock decrement carried (of a cart,
	// its first line's).
	Fence     int64
	CreatedAt time.Time
	UpdatedAt time.Time
	// Lines are the order's products, sorted by id: where its stock lives.
	// GetOrder, Cancel, ExpireOrders and a new cart's outcome fill them
	// in; other reads leave them nil.
	Lines []Line
}

// Line is one product of an order: a row of order_lines.
type Line struct {
	ProductID string
	Quantity  int64
	// AmountCents is the line's price when placed, times its quantity.
	AmountCents int64
	// Fence is the token the line's stock decrement carried.
	Fence int64
}

// Stock is one row of the product_stock table.
type Stock struct {
	ProductID  string
	Available  int64
	PriceCents int64
	// LastFence is the highest fence a write to this row accepted.
	LastFence int64
}

// TransitionError is the error of a forbidden state change. It matches
// [ErrInvalidTransition] with errors.Is.
type TransitionError struct {
	OrderID string
	// To is the state that was asked for.
	To Status
	// Current is the order's state when the move was refused.
	Current Status
}

// Error describes the refused move.
func (e *TransitionError) Error() string {
	return fmt.Sprintf("%v: order %s is %s, cannot move to %s", ErrInvalidTransition, e.OrderID, e.Current, e.To)
}

// Unwrap returns ErrInvalidTransition.
func (e *TransitionError) Unwrap() error { return ErrInvalidTransition }

// Store runs the orders service's statements on a Postgres pool. It is safe
// for concurrent use. The schema must have been migrated (see [Migrate]).
type Store struct {
	pool  *pgxpool.Pool
	stock *fencing.Table
	// noTwinLock skips the advisory lock that serializes twins, so tests
	// can exercise the unique-violation path behind it.
	noTwinLock bool
	failpoints *failpoint.Set
}

// Option configures [New]. A nil option is an error wrapping [ErrInvalid].
type Option func(*config) error

// config is what the options of a Store set.
type config struct {
	failpoints *failpoint.Set
}

// WithFailpoints arms the crash points of fp inside the store's
// transactions, for drills (see internal/failpoint). A nil Set, the
// default, arms none.
func WithFailpoints(fp *failpoint.Set) Option {
	return func(c *config) error { c.failpoints = fp; return nil }
}

// New returns a Store on pool. The caller keeps ownership of the pool and
// closes it after the last call. A nil pool or a nil option is an error
// wrapping [ErrInvalid].
func New(pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: nil pool", ErrInvalid)
	}
	stock, err := fencing.NewTable("product_stock", "product_id")
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	var c config
	if err := option.Apply(&c, opts, ErrInvalid); err != nil {
		return nil, err
	}
	return &Store{pool: pool, stock: stock, failpoints: c.failpoints}, nil
}

// MaxConns is the size of the store's connection pool: how many
// transactions can run at once.
func (s *Store) MaxConns() int { return int(s.pool.Config().MaxConns) }

const orderColumns = `order_id, user_id, product_id, quantity, amount_cents, idempotency_key,
request_fingerprint, status, fence, created_at, updated_at`

// scanOrder reads orderColumns, then extra destinations.
func scanOrder(row pgx.Row, o *Order, extra ...any) error {
	var product *string // NULL for a cart
	dest := append([]any{
		&o.ID, &o.UserID, &product, &o.Quantity, &o.AmountCents, &o.IdempotencyKey,
		&o.Fingerprint, &o.Status, &o.Fence, &o.CreatedAt, &o.UpdatedAt,
	}, extra...)
	err := row.Scan(dest...)
	if product != nil {
		o.ProductID = *product
	}
	return err
}

// insertLines writes order lines from column arrays: order ids, product
// ids, quantities, amounts and fences.
const insertLines = `INSERT INTO order_lines (order_id, product_id, quantity, amount_cents, fence)
SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[])`

// orderLines reads the lines of an order, sorted by product.
func orderLines(ctx context.Context, q pgxQuerier, orderID string) ([]Line, error) {
	rows, err := q.Query(ctx, `SELECT product_id, quantity, amount_cents, fence FROM order_lines
WHERE order_id = $1 ORDER BY product_id`, orderID)
	if err != nil {
		return nil, fmt.Errorf("store: order lines of %q: %w", orderID, err)
	}
	lines, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Line, error) {
		var l Line
		return l, r.Scan(&l.ProductID, &l.Quantity, &l.AmountCents, &l.Fence)
	})
	if err != nil {
		return nil, fmt.Errorf("store: order lines of %q: %w", orderID, err)
	}
	return lines, nil
}

// pgxQuerier runs queries: a pool or a transaction.
type pgxQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// querier is what the read helpers need: a pool or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// GetOrder returns the order with id orderID, or an error wrapping
// [ErrNotFound].
func (s *Store) GetOrder(ctx context.Context, orderID string) (Order, error) {
	if err := checkText("order id", orderID, MaxRefLen); err != nil {
		return Order{}, err
	}
	o, err := getOrder(ctx, s.pool, orderID)
	if err != nil {
		return Order{}, err
	}
	if o.Lines, err = orderLines(ctx, s.pool, orderID); err != nil {
		return Order{}, err
	}
	return o, nil
}

func getOrder(ctx context.Context, q querier, orderID string) (Order, error) {
	var o Order
	err := scanOrder(q.QueryRow(ctx, `SELECT `+orderColumns+` FROM orders WHERE order_id = $1`, orderID), &o)
	if errors.Is(err, pgx.ErrNoRows) {
		return Order{}, fmt.Errorf("%w: order %q", ErrNotFound, orderID)
	}
	if err != nil {
		return Order{}, fmt.Errorf("store: get order %q: %w", orderID, err)
	}
	return o, nil
}

// SeedProduct creates the stock row of productID or resets its available
// units and price; its fence history (last_fence) is kept. It is meant for
// tests, the demo and back-office tools; orders move stock through
// PlaceCarts and Transition.
//
// The units it adds or takes away are counted in the row's stocked total
// (a new product is stocked with available; a reset adds the new available
// minus the old), so the stock balance invariant ([InvariantStockBalance])
// keeps holding across seeds and reseeds.
func (s *Store) SeedProduct(ctx context.Context, productID string, available, priceCents int64) error {
	if err := checkText("product id", productID, request.MaxIDLen); err != nil {
		return err
	}
	if available < 0 || priceCents < 0 {
		return fmt.Errorf("%w: available %d and price %d must not be negative", ErrInvalid, available, priceCents)
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO product_stock (product_id, available, price_cents, stocked) VALUES ($1, $2, $3, $2)
ON CONFLICT (product_id) DO UPDATE SET available = EXCLUDED.available, price_cents = EXCLUDED.price_cents,
    stocked = product_stock.stocked + EXCLUDED.available - product_stock.available`,
		productID, available, priceCents)
	if err != nil {
		return fmt.Errorf("store: seed product %q: %w", productID, err)
	}
	return nil
}

// Stock returns the stock row of productID, or an error wrapping
// [ErrNotFound].
func (s *Store) Stock(ctx context.Context, productID string) (Stock, error) {
	if err := checkText("product id", productID, request.MaxIDLen); err != nil {
		return Stock{}, err
	}
	st := Stock{ProductID: productID}
	err := s.pool.QueryRow(ctx, `SELECT available, price_cents, last_fence FROM product_stock WHERE product_id = $1`, productID).
		Scan(&st.Available, &st.PriceCents, &st.LastFence)
	if errors.Is(err, pgx.ErrNoRows) {
		return Stock{}, fmt.Errorf("%w: product %q", ErrNotFound, productID)
	}
	if err != nil {
		return Stock{}, fmt.Errorf("store: stock of %q: %w", productID, err)
	}
	return st, nil
}

// checkText validates an identifier-like string argument.
func checkText(what, s string, maxLen int) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: empty %s", ErrInvalid, what)
	case len(s) > maxLen:
		return fmt.Errorf("%w: %s is %d bytes, the limit is %d", ErrInvalid, what, len(s), maxLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalid, what)
	}
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return fmt.Errorf("%w: %s contains a NUL byte", ErrInvalid, what)
		}
	}
	return nil
}
