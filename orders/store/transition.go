package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Transition moves order orderID to state to along an edge that leads there
// (PAYING from CREATED; PAID and PAYMENT_FAILED from PAYING; CANCELLED from
// CREATED or PAYMENT_FAILED), with a conditional UPDATE. Moving to
// CANCELLED returns the order's quantity to stock in the same transaction,
// exactly once: the UPDATE that moves the order is the one that restocks.
//
// When the order is already in state to, Transition returns it and does
// nothing: a repeated PAID or CANCELLED is a success, and a repeated cancel
// does not restock twice. Any other current state gives a
// [*TransitionError] (matching [ErrInvalidTransition]) together with the
// order as it is. A missing order gives [ErrNotFound]; a target that no
// edge reaches (CREATED, or an unknown state) gives [ErrInvalid].
//
// Transitions to PAYING, PAID and PAYMENT_FAILED are normally made by the
// payment package through [Store.BeginPayment] and [Store.SettlePayment],
// which keep the payments table in step.
func (s *Store) Transition(ctx context.Context, orderID string, to Status) (Order, error) {
	if err := checkText("order id", orderID, MaxRefLen); err != nil {
		return Order{}, err
	}
	if len(sources(to)) == 0 {
		return Order{}, fmt.Errorf("%w: no transition leads to state %q", ErrInvalid, to)
	}
	var (
		o   Order
		err error
	)
	txErr := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		o, _, err = transitionTx(ctx, tx, orderID, to)
		if errors.Is(err, ErrInvalidTransition) {
			return nil // commit the read; the refusal is returned below
		}
		return err
	})
	if err != nil {
		return o, err
	}
	if txErr != nil {
		return Order{}, fmt.Errorf("store: transition order %q to %s: %w", orderID, to, txErr)
	}
	return o, nil
}

// Cancel moves a CREATED or PAYMENT_FAILED order to CANCELLED and returns
// its quantity to stock, exactly once however often and concurrently it is
// called. It is Transition(ctx, orderID, StatusCancelled).
func (s *Store) Cancel(ctx context.Context, orderID string) (Order, error) {
	return s.Transition(ctx, orderID, StatusCancelled)
}

// transitionTx performs the move inside tx. moved is true when this call
// changed the state; false with a nil error means the order was already in
// state to.
func transitionTx(ctx context.Context, tx pgx.Tx, orderID string, to Status) (o Order, moved bool, err error) {
	err = scanOrder(tx.QueryRow(ctx, `UPDATE orders SET status = $3, updated_at = now()
WHERE order_id = $1 AND status = ANY($2)
RETURNING `+orderColumns, orderID, statusNames(sources(to)), to), &o)
	switch {
	case err == nil:
		if to == StatusCancelled {
			lines, err := restock(ctx, tx, []string{orderID})
			if err != nil {
				return Order{}, false, fmt.Errorf("store: cancel order %q: %w", orderID, err)
			}
			o.Lines = lines[orderID]
		}
		return o, true, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return Order{}, false, fmt.Errorf("store: transition order %q to %s: %w", orderID, to, err)
	}

	// No row changed: answer from the current state.
	cur, err := getOrder(ctx, tx, orderID)
	if err != nil {
		return Order{}, false, err
	}
	if cur.Status == to {
		return cur, false, nil
	}
	return cur, false, &TransitionError{OrderID: orderID, To: to, Current: cur.Status}
}

// statusNames returns ss as plain strings, for a text[] parameter.
func statusNames(ss []Status) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return out
}

// restock gives the lines of the orders back to stock, once: the caller
// moved the orders to CANCELLED in tx by a conditional update. The stock
// rows are locked in product order first, the order every placement takes
// them in, so a restock and a cart never deadlock. It returns the lines
// it gave back, by order.
func restock(ctx context.Context, tx pgx.Tx, orderIDs []string) (map[string][]Line, error) {
	rows, err := tx.Query(ctx, `SELECT order_id, product_id, quantity, amount_cents, fence FROM order_lines
WHERE order_id = ANY($1) ORDER BY order_id, product_id`, orderIDs)
	if err != nil {
		return nil, fmt.Errorf("restock: read lines: %w", err)
	}
	lines := map[string][]Line{}
	var (
		id string
		l  Line
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &l.ProductID, &l.Quantity, &l.AmountCents, &l.Fence}, func() error {
		lines[id] = append(lines[id], l)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("restock: read lines: %w", err)
	}
	if len(lines) != len(orderIDs) {
		return nil, fmt.Errorf("restock: %d of the orders %q have no lines", len(orderIDs)-len(lines), orderIDs)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM product_stock
WHERE product_id IN (SELECT product_id FROM order_lines WHERE order_id = ANY($1))
ORDER BY product_id FOR UPDATE`, orderIDs); err != nil {
		return nil, fmt.Errorf("restock: lock stock: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE product_stock ps SET available = ps.available + m.quantity
FROM (SELECT product_id, sum(quantity) AS quantity FROM order_lines WHERE order_id = ANY($1) GROUP BY product_id) m
WHERE ps.product_id = m.product_id`, orderIDs); err != nil {
		return nil, fmt.Errorf("restock: %w", err)
	}
	return lines, nil
}
