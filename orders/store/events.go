package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrEventConflict reports a provider event id seen before with another
// payment or another result: a forged or corrupted callback. Nothing is
// changed.
var ErrEventConflict = errors.New("store: event id already recorded with other content")

// PaymentEvent is a provider's callback about one payment request.
type PaymentEvent struct {
	// EventID is the provider's unique id of the event.
	EventID     string
	RequestID   string
	Status      PaymentStatus // PaymentSucceeded or PaymentFailed
	ProviderRef string
}

// ApplyPaymentEvent settles a payment from a provider callback, once per
// event id, in one transaction: the event is recorded under its id, the
// payment moves from PENDING to the event's status, and its order from
// PAYING to PAID or PAYMENT_FAILED, each by a conditional update.
//
// A replay of an event already recorded changes nothing and returns the
// order with applied false. An event that agrees with a payment already
// settled (by the charge's own reply or the reconciler) is recorded and
// changes nothing else. An event that contradicts the settled result
// returns [ErrPaymentConflict], one that reuses a recorded id with other
// content [ErrEventConflict], and one for an unknown payment [ErrNotFound];
// none of them changes anything.
func (s *Store) ApplyPaymentEvent(ctx context.Context, ev PaymentEvent) (o Order, applied bool, err error) {
	for _, f := range []struct{ name, v string }{{"event id", ev.EventID}, {"payment request id", ev.RequestID}} {
		if err := checkText(f.name, f.v, MaxRefLen); err != nil {
			return Order{}, false, err
		}
	}
	if ev.Status != PaymentSucceeded && ev.Status != PaymentFailed {
		return Order{}, false, fmt.Errorf("%w: an event cannot settle a payment as %q", ErrInvalid, ev.Status)
	}
	if len(ev.ProviderRef) > MaxRefLen {
		return Order{}, false, fmt.Errorf("%w: provider reference is %d bytes, the limit is %d", ErrInvalid, len(ev.ProviderRef), MaxRefLen)
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		orderID, current, err := lockPayment(ctx, tx, ev.RequestID)
		if err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `INSERT INTO payment_events (event_id, payment_request_id, status, provider_ref)
VALUES ($1, $2, $3, $4) ON CONFLICT (event_id) DO NOTHING`, ev.EventID, ev.RequestID, ev.Status, ev.ProviderRef)
		if err != nil {
			return fmt.Errorf("store: apply event %q: %w", ev.EventID, err)
		}
		if tag.RowsAffected() == 0 {
			var req string
			var st PaymentStatus
			if err := tx.QueryRow(ctx, `SELECT payment_request_id, status FROM payment_events WHERE event_id = $1`, ev.EventID).Scan(&req, &st); err != nil {
				return fmt.Errorf("store: apply event %q: %w", ev.EventID, err)
			}
			if req != ev.RequestID || st != ev.Status {
				return fmt.Errorf("%w: event %q was for %s %s", ErrEventConflict, ev.EventID, req, st)
			}
			o, err = getOrder(ctx, tx, orderID)
			return err
		}
		switch current {
		case PaymentPending:
			if _, err := tx.Exec(ctx, `UPDATE payments SET status = $2, provider_ref = $3, updated_at = now()
WHERE payment_request_id = $1 AND status = 'PENDING'`, ev.RequestID, ev.Status, ev.ProviderRef); err != nil {
				return fmt.Errorf("store: apply event %q: %w", ev.EventID, err)
			}
			to := StatusPaid
			if ev.Status == PaymentFailed {
				to = StatusPaymentFailed
			}
			o, applied, err = transitionTx(ctx, tx, orderID, to)
			return err
		case ev.Status:
			o, err = getOrder(ctx, tx, orderID)
			return err
		}
		return fmt.Errorf("%w: payment %q is %s, event %q says %s", ErrPaymentConflict, ev.RequestID, current, ev.EventID, ev.Status)
	})
	if err != nil {
		return Order{}, false, err
	}
	return o, applied, nil
}

// ClaimPendingPayments claims up to limit PENDING payments of PAYING orders
// whose last attempt is at least olderThan old (by the database's clock),
// least recently attempted first, and returns them. Claiming counts an
// attempt and restarts the payment's age, in the same statement that picks
// the rows with FOR UPDATE SKIP LOCKED: reconcilers on several instances
// never get the same payment within olderThan, and a payment whose charge
// is still in flight (younger than olderThan) is not touched. limit is 1 to
// [MaxPendingBatch].
func (s *Store) ClaimPendingPayments(ctx context.Context, olderThan time.Duration, limit int) ([]Payment, error) {
	if olderThan < 0 {
		return nil, fmt.Errorf("%w: negative age %v", ErrInvalid, olderThan)
	}
	if limit < 1 || limit > MaxPendingBatch {
		return nil, fmt.Errorf("%w: batch size %d is outside 1..%d", ErrInvalid, limit, MaxPendingBatch)
	}
	rows, err := s.pool.Query(ctx, `WITH due AS (
    SELECT p.payment_request_id
    FROM payments p JOIN orders o ON o.order_id = p.order_id
    WHERE p.status = $1 AND o.status = $2 AND p.updated_at <= now() - make_interval(secs => $3)
    ORDER BY p.updated_at, p.payment_request_id
    LIMIT $4
    FOR UPDATE OF p SKIP LOCKED
)
UPDATE payments p SET attempts = p.attempts + 1, updated_at = now()
FROM due WHERE p.payment_request_id = due.payment_request_id AND p.status = $1
RETURNING p.payment_request_id, p.order_id, p.amount_cents, p.status, p.provider_ref, p.attempts, p.created_at, p.updated_at, p.reason`,
		PaymentPending, StatusPaying, olderThan.Seconds(), limit)
	if err != nil {
		return nil, fmt.Errorf("store: claim pending payments: %w", err)
	}
	ps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Payment, error) {
		var p Payment
		return p, scanPayment(r, &p)
	})
	if err != nil {
		return nil, fmt.Errorf("store: claim pending payments: %w", err)
	}
	return ps, nil
}
