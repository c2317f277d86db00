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

// ShortLine is a line of a cart that the stock could not cover.
type ShortLine struct {
	ProductID string
	Quantity  int64
	Available int64
}

// Snapshot is a response saved with an outcome and replayed byte for byte:
// an HTTP status and the body. The caller renders it; the store keeps it as
// data and never looks inside. No content type is kept: it follows from the
// status, where the caller turns a snapshot into a response.
type Snapshot struct {
	Status int
	Body   []byte
}

// checkSnapshot refuses an outcome whose rendered snapshot has no HTTP
// status: it would be saved and replayed as it is.
func checkSnapshot(o Outcome) error {
	if o.ResponseStatus < 100 || o.ResponseStatus > 599 {
		return fmt.Errorf("%w: %s snapshot has HTTP status %d", ErrInvalid, o.Kind, o.ResponseStatus)
	}
	return nil
}

// outOfStockErr is the error of an order the stock of productID cannot cover.
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
// Lookup first waits for any PlaceCarts of the same pair that is still in
// its transaction, so ErrNotFound means that no outcome was committed and
// none was being committed when Lookup returned. An outcome it returns is
// on the synchronous standby too (AwaitDurable): on a primary whose standby
// does not answer, it waits until ctx ends. A request whose processing
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
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared(hashtext($1), hashtext($2))`, userID, key); err != nil {
			return fmt.Errorf("store: lookup: wait for key: %w", err)
		}
		var err error
		if out, err = lookupTx(ctx, tx, userID, key); err != nil {
			return err
		}
		return AwaitDurable(ctx, tx)
	})
	if err != nil {
		return Outcome{}, err
	}
	out.Replayed = true
	return out, nil
}

// AwaitDurable makes the commit of tx wait for the synchronous standby, as
// a write's commit does: tx writes a row of sync_marks (a commit waits for
// the standby only when its transaction wrote WAL), so its commit returns
// only once the standby has its WAL. What tx read was committed earlier in
// the WAL, so it is on the standby too by then.
// A read alone cannot tell: a transaction whose wait for the standby was
// ended without it (its backend terminated, as when a primary that lost
// its standby is stopped) is visible as committed on that primary alone,
// and a failover to the standby loses it. Where replication is not
// synchronous, the commit returns at once.
func AwaitDurable(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, markSync); err != nil {
		return fmt.Errorf("store: mark for the standby: %w", err)
	}
	return nil
}

// markSync is AwaitDurable's write; the relay of package events runs the
// same.
const markSync = `INSERT INTO sync_marks (slot, at) VALUES (pg_backend_pid() % 64, now())
ON CONFLICT (slot) DO UPDATE SET at = EXCLUDED.at`

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
