package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/quorumlock/quorumlock/orders/request"
)

// OutcomeKind says what a saved outcome of POST /orders is.
type OutcomeKind string

// Outcome kinds.
const (
	// OutcomeOrder: an order was created; Outcome.Order holds it.
	OutcomeOrder OutcomeKind = "ORDER"
	// OutcomeOutOfStock: the request was rejected for lack of stock.
	OutcomeOutOfStock OutcomeKind = "OUT_OF_STOCK"
)

// Outcome is the saved, final answer to one (user, idempotency key): an
// order, or a rejection that replays like one.
type Outcome struct {
	Kind           OutcomeKind
	UserID         string
	IdempotencyKey string
	// Fingerprint is the fingerprint of the request that produced the
	// outcome.
	Fingerprint string
	ProductID   string
	Quantity    int64
	// ResponseStatus and ResponseBody are the response snapshot saved with
	// the outcome: the HTTP status and the exact body bytes to replay. No
	// content type is stored; with the default renderers a 2xx body is
	// application/json and a 4xx body application/problem+json.
	ResponseStatus int
	ResponseBody   []byte
	// Replayed is true when the outcome was read back rather than created
	// by this call.
	Replayed  bool
	CreatedAt time.Time
	// Order is the order as it is now (its Status may have moved on since
	// the snapshot); the zero Order unless Kind is OutcomeOrder.
	Order Order
	// Short names the lines of a cart that the stock could not cover, for
	// the snapshot of a new out-of-stock outcome; a replay has only the
	// snapshot.
	Short []ShortLine
}

// Snapshot is a response saved with an outcome and replayed byte for byte:
// an HTTP status and the body. The caller renders it; the store keeps it as
// data and never looks inside. No content type is kept: it follows from the
// status, where the caller turns a snapshot into a response.
type Snapshot struct {
	Status int
	Body   []byte
}

func (r Snapshot) check(what string) error {
	if r.Status < 100 || r.Status > 599 {
		return fmt.Errorf("%w: %s snapshot has HTTP status %d", ErrInvalid, what, r.Status)
	}
	return nil
}

// PlaceOrder is the input of [Store.PlaceOrder]. Every field but FenceKey
// (or Fence) is required.
type PlaceOrder struct {
	// UserID is the authenticated user (1 to request.MaxUserIDLen bytes);
	// never taken from the request body.
	UserID string
	// IdempotencyKey is the client's Idempotency-Key, checked where it
	// entered.
	IdempotencyKey request.Key
	// Fingerprint identifies the request's business content; a replay with
	// another fingerprint is refused with ErrFingerprintMismatch.
	Fingerprint string
	// ProductID is 1 to request.MaxIDLen bytes.
	ProductID string
	// Quantity is request.MinQuantity to request.MaxQuantity.
	Quantity int64
	// Fence is the fencing token for the product's stock: the lease's
	// Fence() when the stock lock is held. Zero asks for FenceKey instead.
	Fence int64
	// FenceKey, when Fence is zero, is the fencing counter (the key the
	// lock's Fencer uses) from which the transaction takes its token
	// itself, once it holds the stock row: the way to write when the
	// service arbitrates with Postgres alone. Writers then get their fences
	// in the order they get the row, so concurrent writers never make each
	// other's fences stale; a token taken before the transaction could
	// reach the row after a later one and be refused.
	FenceKey string
	// OrderID is the id the new order gets (1 to MaxRefLen bytes), made by
	// the caller so that it can render Created before the transaction.
	// A replay keeps the saved order's id.
	OrderID string
	// Created is the response snapshot saved with a new order and replayed
	// byte for byte.
	Created Snapshot
	// OutOfStock is the response snapshot saved when the stock is short,
	// and replayed like Created.
	OutOfStock Snapshot
}

func (p PlaceOrder) validate() error {
	if err := checkText("user id", p.UserID, request.MaxUserIDLen); err != nil {
		return err
	}
	if p.IdempotencyKey.IsZero() {
		return fmt.Errorf("%w: no idempotency key", ErrInvalid)
	}
	if err := checkText("fingerprint", p.Fingerprint, MaxFingerprintLen); err != nil {
		return err
	}
	if err := checkText("product id", p.ProductID, request.MaxIDLen); err != nil {
		return err
	}
	if p.Quantity < request.MinQuantity || p.Quantity > request.MaxQuantity {
		return fmt.Errorf("%w: quantity %d is outside %d..%d", ErrInvalid, p.Quantity, request.MinQuantity, request.MaxQuantity)
	}
	if err := checkText("order id", p.OrderID, MaxRefLen); err != nil {
		return err
	}
	if err := p.Created.check("created"); err != nil {
		return err
	}
	if err := p.OutOfStock.check("out-of-stock"); err != nil {
		return err
	}
	switch {
	case p.Fence < 0:
		return fmt.Errorf("%w: fence %d is negative", ErrInvalid, p.Fence)
	case p.Fence == 0 && p.FenceKey == "":
		return fmt.Errorf("%w: neither a fence nor a fence key", ErrInvalid)
	case p.Fence > 0 && p.FenceKey != "":
		return fmt.Errorf("%w: both a fence and a fence key", ErrInvalid)
	}
	return nil
}

// PlaceOrder places one order in one transaction, or answers from the
// outcome already saved for (p.UserID, p.IdempotencyKey): [Store.PlaceBatch]
// with one order, saving p.Created with a new order and p.OutOfStock with
// a rejection. The results are:
//
//   - a new order: the Outcome (Kind OutcomeOrder, Replayed false) and nil;
//   - a replay of a saved order with the same fingerprint: the saved
//     Outcome (Replayed true) and nil;
//   - out of stock, new or replayed: the saved Outcome (Kind
//     OutcomeOutOfStock) and an error wrapping ErrOutOfStock — the snapshot
//     in the Outcome is the answer to send;
//   - ErrFingerprintMismatch when the key was used for another request;
//   - ErrUnknownProduct, ErrStaleFence or ErrInvalid, with nothing written.
//
// Other errors (the database is unreachable, the context ended) leave the
// database as it was unless the commit itself was interrupted; the caller
// can then tell with [Store.Lookup], which waits for any transaction of the
// same (user, key) still in flight.
func (s *Store) PlaceOrder(ctx context.Context, p PlaceOrder) (Outcome, error) {
	if err := p.validate(); err != nil {
		return Outcome{}, err
	}
	out, err := s.PlaceBatch(ctx, Batch{
		ProductID: p.ProductID, Fence: p.Fence, FenceKey: p.FenceKey,
		Orders: []OrderRequest{{UserID: p.UserID, IdempotencyKey: p.IdempotencyKey, Fingerprint: p.Fingerprint,
			Quantity: p.Quantity, OrderID: p.OrderID}},
		Snapshot: func(o Outcome) Snapshot {
			if o.Kind == OutcomeOrder {
				return p.Created
			}
			return p.OutOfStock
		},
	})
	if err != nil {
		return Outcome{}, err
	}
	return out.Orders[0].Outcome, out.Orders[0].Err
}

func outOfStockErr(productID string, qty int64) error {
	return fmt.Errorf("%w: product %q, quantity %d", ErrOutOfStock, productID, qty)
}

// nonNil keeps an empty body empty rather than NULL.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// replay answers a request from a saved outcome.
func replay(saved Outcome, fingerprint string) (Outcome, error) {
	if saved.Fingerprint != fingerprint {
		return Outcome{}, fmt.Errorf("%w: user %q key %q", ErrFingerprintMismatch, saved.UserID, saved.IdempotencyKey)
	}
	saved.Replayed = true
	if saved.Kind == OutcomeOutOfStock {
		return saved, outOfStockErr(saved.ProductID, saved.Quantity)
	}
	return saved, nil
}

// Lookup returns the outcome saved for (userID, idempotencyKey) with its
// fingerprint and response snapshot (Replayed is true), or an error
// wrapping [ErrNotFound].
//
// Lookup first waits for any PlaceOrder of the same pair that is still in
// its transaction, so ErrNotFound means that no outcome was committed and
// none was being committed when Lookup returned. A request whose processing
// lease expired can use it to decide between replaying and proceeding.
func (s *Store) Lookup(ctx context.Context, userID string, key request.Key) (Outcome, error) {
	if err := checkText("user id", userID, request.MaxUserIDLen); err != nil {
		return Outcome{}, err
	}
	if key.IsZero() {
		return Outcome{}, fmt.Errorf("%w: no idempotency key", ErrInvalid)
	}
	return s.lookup(ctx, userID, key.String())
}

func (s *Store) lookup(ctx context.Context, userID, key string) (Outcome, error) {
	var out Outcome
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared(hashtext($1), hashtext($2))`, userID, key); err != nil {
			return fmt.Errorf("store: lookup: wait for key: %w", err)
		}
		var err error
		out, err = lookupTx(ctx, tx, userID, key)
		return err
	})
	if err != nil {
		return Outcome{}, err
	}
	out.Replayed = true
	return out, nil
}

// lookupTx reads the saved outcome of (userID, key): an order first, then a
// saved rejection.
func lookupTx(ctx context.Context, q querier, userID, key string) (Outcome, error) {
	var (
		o      Order
		status int
		body   []byte
	)
	err := scanOrder(q.QueryRow(ctx, `SELECT `+orderColumns+`, response_status, response_body
FROM orders WHERE user_id = $1 AND idempotency_key = $2`, userID, key), &o, &status, &body)
	if err == nil {
		return orderOutcome(o, status, body), nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Outcome{}, fmt.Errorf("store: lookup order: %w", err)
	}

	out := Outcome{UserID: userID, IdempotencyKey: key}
	err = q.QueryRow(ctx, `SELECT request_fingerprint, outcome, COALESCE(product_id, ''), quantity, response_status, response_body, created_at
FROM request_outcomes WHERE user_id = $1 AND idempotency_key = $2`, userID, key).
		Scan(&out.Fingerprint, &out.Kind, &out.ProductID, &out.Quantity, &out.ResponseStatus, &out.ResponseBody, &out.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Outcome{}, fmt.Errorf("%w: no outcome for user %q key %q", ErrNotFound, userID, key)
	}
	if err != nil {
		return Outcome{}, fmt.Errorf("store: lookup outcome: %w", err)
	}
	return out, nil
}

// isIdempotencyConflict reports a unique violation on (user_id,
// idempotency_key) in orders or request_outcomes.
func isIdempotencyConflict(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
		return false
	}
	return pgErr.ConstraintName == "orders_user_idempotency_unique" || pgErr.ConstraintName == "request_outcomes_pkey"
}

// orderOutcome is the saved outcome of an order and its response snapshot.
func orderOutcome(o Order, status int, body []byte) Outcome {
	return Outcome{
		Kind:           OutcomeOrder,
		UserID:         o.UserID,
		IdempotencyKey: o.IdempotencyKey,
		Fingerprint:    o.Fingerprint,
		ProductID:      o.ProductID,
		Quantity:       o.Quantity,
		ResponseStatus: status,
		ResponseBody:   body,
		CreatedAt:      o.CreatedAt,
		Order:          o,
	}
}
