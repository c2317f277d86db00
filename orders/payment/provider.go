// Package payment charges orders through a payment provider without ever
// charging twice, and settles payments whose outcome was lost.
//
// Every charge of an order carries the same payment request id,
// [RequestID](orderID) = orderID + ":pay", and the provider must be
// idempotent on it: a repeated charge with a known id returns the first
// result and moves no money. That is what makes retries and
// reconciliation safe.
//
// [Service.Pay] moves the order CREATED -> PAYING and records a PENDING
// payment before it sends the charge, so a crash or a lost reply leaves a
// PAYING order with a known request id. [Service.Reconcile] finds such
// orders, asks the provider about the same id, and settles them; if the
// provider never saw the charge, it sends it again with the same id.
//
// [Fake] is an in-memory provider for tests and the demo that can decline,
// lose requests or replies, keep charges pending, and add latency.
package payment

import (
	"context"
	"errors"
)

// Status is a provider's answer about one payment request.
type Status string

// Provider answers.
const (
	// StatusSucceeded: the charge went through.
	StatusSucceeded Status = "SUCCEEDED"
	// StatusFailed: the charge was definitely declined; no money moved.
	StatusFailed Status = "FAILED"
	// StatusPending: the provider accepted the request but has no final
	// answer yet.
	StatusPending Status = "PENDING"
	// StatusNotFound: the provider has no charge with this request id
	// (Query only).
	StatusNotFound Status = "NOT_FOUND"
)

// ChargeRequest asks a provider to charge an order.
type ChargeRequest struct {
	// PaymentRequestID is the stable idempotency id of the charge.
	PaymentRequestID string
	OrderID          string
	AmountCents      int64
}

// Result is a provider's answer.
type Result struct {
	Status Status
	// ProviderRef is the provider's own reference for the charge, when it
	// has one.
	ProviderRef string
}

// Provider is a payment provider.
//
// Charge must be idempotent on PaymentRequestID: a second Charge with an id
// it has seen returns the first result and does not charge again. A
// definite decline is a nil error with StatusFailed; any error means the
// outcome is unknown (the charge may or may not have happened), and the
// caller will find out later with Query on the same id.
//
// Query returns the result recorded for the id, or StatusNotFound when the
// provider never received a charge with it.
type Provider interface {
	Charge(ctx context.Context, req ChargeRequest) (Result, error)
	Query(ctx context.Context, paymentRequestID string) (Result, error)
}

// RequestID returns the stable payment request id of an order's charge.
func RequestID(orderID string) string { return orderID + ":pay" }

var (
	// ErrInvalid reports bad input or configuration.
	ErrInvalid = errors.New("payment: invalid input")

	// ErrTimeout reports a provider call whose outcome is unknown because
	// no reply arrived. The Fake returns it; real providers may return any
	// error for the same meaning.
	ErrTimeout = errors.New("payment: provider did not reply")

	// ErrPending reports a payment whose outcome is not known yet: the
	// order stays PAYING until a reconciler settles it. The error is a
	// [*PendingError].
	ErrPending = errors.New("payment: outcome pending")

	// ErrDeclined reports a payment the provider declined; the order is
	// PAYMENT_FAILED.
	ErrDeclined = errors.New("payment: declined")
)

// PendingError says that an order's payment has no known outcome yet. It
// matches [ErrPending], and its cause (for instance [ErrTimeout]) too.
type PendingError struct {
	OrderID          string
	PaymentRequestID string
	// Cause is why the outcome is unknown; nil when another call is
	// already paying the order or the provider answered PENDING.
	Cause error
}

// Error describes the pending payment.
func (e *PendingError) Error() string {
	msg := ErrPending.Error() + ": order " + e.OrderID + " (payment request " + e.PaymentRequestID + ")"
	if e.Cause != nil {
		msg += ": " + e.Cause.Error()
	}
	return msg
}

// Unwrap returns ErrPending and the cause, for errors.Is and errors.As.
func (e *PendingError) Unwrap() []error {
	if e.Cause == nil {
		return []error{ErrPending}
	}
	return []error{ErrPending, e.Cause}
}
