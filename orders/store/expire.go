package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultHold is how long an unpaid order keeps its stock before
// ExpireOrders cancels it: a CREATED order from its creation, a
// PAYMENT_FAILED one from its failure.
const DefaultHold = 15 * time.Minute

// MaxExpireBatch is the largest batch [Store.ExpireOrders] takes.
const MaxExpireBatch = 1000

// ExpireOrders cancels up to limit unpaid orders, oldest first, and returns
// their lines to stock, in one transaction: CREATED orders placed at
// least hold ago, and PAYMENT_FAILED orders whose payment failed at least
// hold ago (by the database's clock), so that neither state keeps stock
// when its user walks away. The orders are claimed with FOR UPDATE SKIP
// LOCKED, so reapers on several instances never take the same order, and
// moved by a conditional update (status unchanged), so an order paid or
// cancelled meanwhile is left alone and no quantity comes back twice. It
// returns the orders it cancelled, with their lines. limit is 1 to
// [MaxExpireBatch].
func (s *Store) ExpireOrders(ctx context.Context, hold time.Duration, limit int) ([]Order, error) {
	if hold <= 0 {
		return nil, fmt.Errorf("%w: hold %v must be positive", ErrInvalid, hold)
	}
	if limit < 1 || limit > MaxExpireBatch {
		return nil, fmt.Errorf("%w: batch size %d is outside 1..%d", ErrInvalid, limit, MaxExpireBatch)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: expire orders: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	rows, err := tx.Query(ctx, `WITH due AS (
    SELECT order_id, status FROM orders
    WHERE (status = $1 AND created_at <= now() - make_interval(secs => $2))
       OR (status = $5 AND updated_at <= now() - make_interval(secs => $2))
    ORDER BY created_at, order_id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
UPDATE orders o SET status = $4, updated_at = now()
FROM due WHERE o.order_id = due.order_id AND o.status = due.status
RETURNING `+qualified("o.", orderColumns), StatusCreated, hold.Seconds(), limit, StatusCancelled, StatusPaymentFailed)
	if err != nil {
		return nil, fmt.Errorf("store: expire orders: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Order, error) {
		var o Order
		return o, scanOrder(r, &o)
	})
	if err != nil {
		return nil, fmt.Errorf("store: expire orders: %w", err)
	}
	if len(out) == 0 {
		return nil, nil
	}
	ids := make([]string, len(out))
	for i, o := range out {
		ids[i] = o.ID
	}
	lines, err := restock(ctx, tx, ids)
	if err != nil {
		return nil, fmt.Errorf("store: expire orders: %w", err)
	}
	for i := range out {
		out[i].Lines = lines[out[i].ID]
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("store: expire orders: commit: %w", err)
	}
	return out, nil
}

// qualified prefixes every column of a comma-separated list.
func qualified(prefix, columns string) string {
	parts := strings.Split(columns, ",")
	for i, c := range parts {
		parts[i] = prefix + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}

// StockBalance is the check behind "stock never leaks": for every product,
// the units available plus the units held by orders that are not cancelled.
type StockBalance struct {
	ProductID string
	Available int64
	Held      int64 // sum of the quantities of the lines of orders in a state that Holds
}

// StockBalances returns the balance of every product, by product id.
func (s *Store) StockBalances(ctx context.Context) ([]StockBalance, error) {
	rows, err := s.pool.Query(ctx, `SELECT ps.product_id, ps.available, COALESCE(sum(l.quantity) FILTER (WHERE o.status <> $1), 0)::bigint
FROM product_stock ps LEFT JOIN order_lines l ON l.product_id = ps.product_id LEFT JOIN orders o ON o.order_id = l.order_id
GROUP BY ps.product_id, ps.available ORDER BY ps.product_id`, StatusCancelled)
	if err != nil {
		return nil, fmt.Errorf("store: stock balances: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (StockBalance, error) {
		var b StockBalance
		return b, r.Scan(&b.ProductID, &b.Available, &b.Held)
	})
	if err != nil {
		return nil, fmt.Errorf("store: stock balances: %w", err)
	}
	return out, nil
}

// MaxPurgeBatch is the largest batch [Store.PurgeOutcomes] deletes.
const MaxPurgeBatch = 10000

// PurgeOutcomes deletes up to limit saved non-order outcomes (out-of-stock
// answers in request_outcomes) older than retention, oldest first, and
// returns how many it deleted. A retry of such a request after that is
// treated as a new request; keep retention longer than any client retries
// and at least the Redis record's lifetime. Orders are never purged: they
// are the business record, and their UNIQUE(user_id, idempotency_key) keeps
// answering replays. limit is 1 to [MaxPurgeBatch].
func (s *Store) PurgeOutcomes(ctx context.Context, retention time.Duration, limit int) (int64, error) {
	if retention <= 0 {
		return 0, fmt.Errorf("%w: retention %v must be positive", ErrInvalid, retention)
	}
	if limit < 1 || limit > MaxPurgeBatch {
		return 0, fmt.Errorf("%w: batch size %d is outside 1..%d", ErrInvalid, limit, MaxPurgeBatch)
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM request_outcomes WHERE (user_id, idempotency_key) IN (
    SELECT user_id, idempotency_key FROM request_outcomes
    WHERE created_at <= now() - make_interval(secs => $1)
    ORDER BY created_at LIMIT $2
    FOR UPDATE SKIP LOCKED)`, retention.Seconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("store: purge outcomes: %w", err)
	}
	return tag.RowsAffected(), nil
}
