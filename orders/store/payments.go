package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// MaxPendingBatch is the largest batch [Store.PendingPayments] returns.
const MaxPendingBatch = 1000

// ErrPaymentConflict reports a payment already settled with a different
// result than the one being recorded. It needs a human: a provider that is
// idempotent on the payment request id never answers both ways.
var ErrPaymentConflict = errors.New("store: payment already settled with a different result")

// PaymentStatus is the state of a payment request.
type PaymentStatus string

// Payment states.
const (
	// PaymentPending: the charge was or may have been sent; its result is
	// not known yet.
	PaymentPending PaymentStatus = "PENDING"
	// PaymentSucceeded: the provider confirmed the charge.
	PaymentSucceeded PaymentStatus = "SUCCEEDED"
	// PaymentFailed: the provider definitely declined the charge.
	PaymentFailed PaymentStatus = "FAILED"
)

// Payment is one row of the payments table.
type Payment struct {
	// RequestID is the stable payment request id sent to the provider.
	RequestID   string
	OrderID     string
	AmountCents int64
	Status      PaymentStatus
	// ProviderRef is the provider's reference once settled.
	ProviderRef string
	// Attempts counts the reconciliation rounds that found the payment
	// still pending.
	Attempts  int
	CreatedAt time.Time
	UpdatedAt time.Time
	// Reason says why a PENDING payment is still open (see
	// [Store.NotePayment]), why a FAILED one failed when the provider did
	// not simply decline it ([Store.FailPayment]), or that a SUCCEEDED one
	// needed no charge ([Store.SettleFree]); empty otherwise.
	Reason string
}

// MaxReasonLen bounds a payment's Reason, in bytes.
const MaxReasonLen = 512

const paymentColumns = `payment_request_id, order_id, amount_cents, status, provider_ref, attempts, created_at, updated_at, reason`

func scanPayment(row pgx.Row, p *Payment) error {
	return row.Scan(&p.RequestID, &p.OrderID, &p.AmountCents, &p.Status, &p.ProviderRef, &p.Attempts, &p.CreatedAt, &p.UpdatedAt, &p.Reason)
}

// checkReason validates a payment's reason: empty, or text of at most
// MaxReasonLen bytes.
func checkReason(reason string) error {
	if reason == "" {
		return nil
	}
	return checkText("payment reason", reason, MaxReasonLen)
}

// PaymentStart is the result of [Store.BeginPayment].
type PaymentStart struct {
	// Order is the order after the call.
	Order Order
	// Payment is the payment row for the request id.
	Payment Payment
	// Started is true when this call moved the order from CREATED to
	// PAYING. Only that caller should send the charge; the others find the
	// payment in flight, and a reconciler settles it if its sender died.
	Started bool
}

// BeginPayment moves order orderID from CREATED to PAYING and records a
// PENDING payment for requestID (the stable id the provider will see), in
// one transaction. The payment row is written before any charge is sent, so
// a crash after this call leaves a PAYING order that a reconciler can find
// and settle with the same request id.
//
// If the order is already PAYING, BeginPayment changes nothing (besides
// creating a missing payment row) and returns Started false. Any other state
// gives a [*TransitionError] with the order: PAID, PAYMENT_FAILED (already
// settled) or CANCELLED; the PaymentStart then holds the order and, when the
// order has one, its payment.
func (s *Store) BeginPayment(ctx context.Context, orderID, requestID string) (PaymentStart, error) {
	if err := checkText("order id", orderID, MaxRefLen); err != nil {
		return PaymentStart{}, err
	}
	if err := checkText("payment request id", requestID, MaxRefLen); err != nil {
		return PaymentStart{}, err
	}
	var res PaymentStart
	var refusal error
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		o, moved, err := transitionTx(ctx, tx, orderID, StatusPaying)
		if errors.Is(err, ErrInvalidTransition) {
			// A settled order: its payment, if it has one, says how.
			res.Order, refusal = o, err
			err := scanPayment(tx.QueryRow(ctx, `SELECT `+paymentColumns+` FROM payments WHERE payment_request_id = $1`, requestID), &res.Payment)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("store: begin payment %q: %w", requestID, err)
			}
			return nil
		}
		if err != nil {
			return err
		}
		res.Order, res.Started = o, moved
		_, err = tx.Exec(ctx, `INSERT INTO payments (payment_request_id, order_id, amount_cents, status)
VALUES ($1, $2, $3, $4) ON CONFLICT (payment_request_id) DO NOTHING`, requestID, o.ID, o.AmountCents, PaymentPending)
		if err != nil {
			return fmt.Errorf("store: begin payment %q: %w", requestID, err)
		}
		if err := scanPayment(tx.QueryRow(ctx, `SELECT `+paymentColumns+` FROM payments WHERE payment_request_id = $1`, requestID), &res.Payment); err != nil {
			return fmt.Errorf("store: begin payment %q: %w", requestID, err)
		}
		if res.Payment.OrderID != orderID {
			return fmt.Errorf("%w: payment request id %q belongs to order %q", ErrInvalid, requestID, res.Payment.OrderID)
		}
		return nil
	})
	if err != nil {
		return PaymentStart{}, err
	}
	if refusal != nil {
		return res, refusal
	}
	return res, nil
}

// SettlePayment records the provider's final answer for requestID
// (PaymentSucceeded or PaymentFailed) and moves its order from PAYING to
// PAID or PAYMENT_FAILED, in one transaction. Settling again with the same
// answer returns the order and changes nothing; a different answer than
// the one recorded gives [ErrPaymentConflict].
func (s *Store) SettlePayment(ctx context.Context, requestID string, status PaymentStatus, providerRef string) (Order, error) {
	if status != PaymentSucceeded && status != PaymentFailed {
		return Order{}, fmt.Errorf("%w: cannot settle a payment as %q", ErrInvalid, status)
	}
	if len(providerRef) > MaxRefLen {
		return Order{}, fmt.Errorf("%w: provider reference is %d bytes, the limit is %d", ErrInvalid, len(providerRef), MaxRefLen)
	}
	return s.settle(ctx, requestID, settlement{status: status, providerRef: providerRef})
}

// FailPayment ends payment requestID as FAILED with reason, and its order
// as PAYMENT_FAILED, in one transaction: for a charge that can never
// succeed however often it is sent, such as one the provider refused as
// invalid. The order then leaves PAYMENT_FAILED like a declined one (cancel,
// or the reaper), never waiting on a retry that cannot help. reason is 1 to
// [MaxReasonLen] bytes. Failing again returns the order and changes
// nothing; a payment already SUCCEEDED gives [ErrPaymentConflict].
func (s *Store) FailPayment(ctx context.Context, requestID, reason string) (Order, error) {
	if reason == "" {
		return Order{}, fmt.Errorf("%w: a failed payment needs its reason", ErrInvalid)
	}
	if err := checkReason(reason); err != nil {
		return Order{}, err
	}
	return s.settle(ctx, requestID, settlement{status: PaymentFailed, reason: reason})
}

// ReasonFree is the Reason of a payment settled by [Store.SettleFree].
const ReasonFree = "free order: nothing to charge"

// SettleFree settles payment requestID of amount zero as SUCCEEDED with
// no charge, and its order as PAID: a free order is paid once it is
// confirmed, and no provider is asked to move nothing. A payment with a
// positive amount gives [ErrInvalid] and changes nothing.
func (s *Store) SettleFree(ctx context.Context, requestID string) (Order, error) {
	return s.settle(ctx, requestID, settlement{status: PaymentSucceeded, reason: ReasonFree, free: true})
}

// settlement is a final answer about one payment.
type settlement struct {
	status      PaymentStatus // PaymentSucceeded or PaymentFailed
	providerRef string
	reason      string
	free        bool // only a payment of amount zero may settle so
}

// settle records st for requestID and moves its order from PAYING to PAID
// or PAYMENT_FAILED, in one transaction.
func (s *Store) settle(ctx context.Context, requestID string, st settlement) (Order, error) {
	if err := checkText("payment request id", requestID, MaxRefLen); err != nil {
		return Order{}, err
	}
	to := StatusPaid
	if st.status == PaymentFailed {
		to = StatusPaymentFailed
	}
	var o Order
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		orderID, current, err := lockPayment(ctx, tx, requestID)
		if err != nil {
			return err
		}
		switch current {
		case PaymentPending:
			tag, err := tx.Exec(ctx, `UPDATE payments SET status = $2, provider_ref = $3, reason = $4, updated_at = now()
WHERE payment_request_id = $1 AND (NOT $5 OR amount_cents = 0)`, requestID, st.status, st.providerRef, st.reason, st.free)
			if err != nil {
				return fmt.Errorf("store: settle payment %q: %w", requestID, err)
			}
			if tag.RowsAffected() == 0 {
				return fmt.Errorf("%w: payment %q has an amount to charge; it is not free", ErrInvalid, requestID)
			}
		case st.status:
		default:
			return fmt.Errorf("%w: payment %q is %s, now settled as %s", ErrPaymentConflict, requestID, current, st.status)
		}
		o, _, err = transitionTx(ctx, tx, orderID, to)
		return err
	})
	if err != nil {
		return o, err
	}
	return o, nil
}

// NotePayment records why PENDING payment requestID is still open (1 to
// [MaxReasonLen] bytes), for the next pay call to report and for
// operators. It leaves the payment's age alone, and does nothing to a
// settled payment.
func (s *Store) NotePayment(ctx context.Context, requestID, reason string) error {
	if err := checkText("payment request id", requestID, MaxRefLen); err != nil {
		return err
	}
	if reason == "" {
		return fmt.Errorf("%w: empty payment reason", ErrInvalid)
	}
	if err := checkReason(reason); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `UPDATE payments SET reason = $2 WHERE payment_request_id = $1 AND status = $3`,
		requestID, reason, PaymentPending)
	if err != nil {
		return fmt.Errorf("store: note payment %q: %w", requestID, err)
	}
	return nil
}

// lockPayment locks the order of payment requestID, then the payment, in
// that order: the order every transaction that touches both takes
// (BeginPayment updates the order, then writes the payment), so that
// concurrent begins, settlements and callbacks never deadlock. It returns
// the order id and the payment's status, or an error wrapping ErrNotFound.
func lockPayment(ctx context.Context, tx pgx.Tx, requestID string) (orderID string, current PaymentStatus, err error) {
	err = tx.QueryRow(ctx, `SELECT o.order_id FROM orders o JOIN payments p ON p.order_id = o.order_id
WHERE p.payment_request_id = $1 FOR UPDATE OF o`, requestID).Scan(&orderID)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", fmt.Errorf("%w: payment %q", ErrNotFound, requestID)
	}
	if err != nil {
		return "", "", fmt.Errorf("store: lock payment %q: %w", requestID, err)
	}
	if err := tx.QueryRow(ctx, `SELECT status FROM payments WHERE payment_request_id = $1 FOR UPDATE`, requestID).Scan(&current); err != nil {
		return "", "", fmt.Errorf("store: lock payment %q: %w", requestID, err)
	}
	return orderID, current, nil
}

// PendingPayments returns up to limit PENDING payments of PAYING orders
// that have not changed for at least olderThan (by the database's clock),
// least recently touched first. limit is 1 to [MaxPendingBatch].
func (s *Store) PendingPayments(ctx context.Context, olderThan time.Duration, limit int) ([]Payment, error) {
	if olderThan < 0 {
		return nil, fmt.Errorf("%w: negative age %v", ErrInvalid, olderThan)
	}
	if limit < 1 || limit > MaxPendingBatch {
		return nil, fmt.Errorf("%w: batch size %d is outside 1..%d", ErrInvalid, limit, MaxPendingBatch)
	}
	rows, err := s.pool.Query(ctx, `SELECT p.payment_request_id, p.order_id, p.amount_cents, p.status, p.provider_ref,
       p.attempts, p.created_at, p.updated_at, p.reason
FROM payments p JOIN orders o ON o.order_id = p.order_id
WHERE p.status = $1 AND o.status = $2 AND p.updated_at <= now() - make_interval(secs => $3)
ORDER BY p.updated_at, p.payment_request_id
LIMIT $4`, PaymentPending, StatusPaying, olderThan.Seconds(), limit)
	if err != nil {
		return nil, fmt.Errorf("store: pending payments: %w", err)
	}
	ps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Payment, error) {
		var p Payment
		return p, scanPayment(r, &p)
	})
	if err != nil {
		return nil, fmt.Errorf("store: pending payments: %w", err)
	}
	return ps, nil
}

// TouchPayment notes one more reconciliation round that found payment
// requestID still pending: it counts the attempt and moves the payment to
// the back of the PendingPayments order. It does nothing to a settled
// payment.
func (s *Store) TouchPayment(ctx context.Context, requestID string) error {
	if err := checkText("payment request id", requestID, MaxRefLen); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `UPDATE payments SET attempts = attempts + 1, updated_at = now()
WHERE payment_request_id = $1 AND status = $2`, requestID, PaymentPending)
	if err != nil {
		return fmt.Errorf("store: touch payment %q: %w", requestID, err)
	}
	return nil
}

// GetPayment returns the payment with request id requestID, or an error
// wrapping [ErrNotFound].
func (s *Store) GetPayment(ctx context.Context, requestID string) (Payment, error) {
	if err := checkText("payment request id", requestID, MaxRefLen); err != nil {
		return Payment{}, err
	}
	var p Payment
	err := scanPayment(s.pool.QueryRow(ctx, `SELECT `+paymentColumns+` FROM payments WHERE payment_request_id = $1`, requestID), &p)
	if errors.Is(err, pgx.ErrNoRows) {
		return Payment{}, fmt.Errorf("%w: payment %q", ErrNotFound, requestID)
	}
	if err != nil {
		return Payment{}, fmt.Errorf("store: get payment %q: %w", requestID, err)
	}
	return p, nil
}
