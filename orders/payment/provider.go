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
// [HTTPProvider] talks to a provider over HTTP; devtools/fakepay is
// the fake provider that devtools/cmd/fakepay serves, and tests use it in
// process too.
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
// definite decline is a nil error with StatusFailed. An error matching
// [ErrRejected] means the request itself was refused as invalid (a zero
// amount, a malformed id, a key the provider knows with other content): no
// money moved, and sending the same request again can never succeed. Any
// other error means the outcome is unknown (the charge may or may not have
// happened), and the caller will find out later with Query on the same id.
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
	// no reply arrived. The fakes return it; real providers may return any
	// error for the same meaning.
	ErrTimeout = errors.New("payment: provider did not reply")

	// ErrPending reports a payment whose outcome is not known yet: the
	// order stays PAYING until a reconciler settles it. The error is a
	// [*PendingError].
	ErrPending = errors.New("payment: outcome pending")

	// ErrDeclined reports a payment that ended without a charge: the
	// provider declined it, or refused the request ([ErrRejected]); the
	// order is PAYMENT_FAILED. The error is a [*FailedError].
	ErrDeclined = errors.New("payment: declined")

	// ErrRejected reports a charge request that the provider (or the
	// client, before sending it) refused as invalid: no money moved, and
	// the same request can never succeed, so the payment ends FAILED with
	// the refusal as its reason instead of waiting for a retry. It is
	// returned together with [ErrInvalid].
	ErrRejected = errors.New("payment: charge request rejected")
)

// rejectedError is a refused charge request; detail says why.
type rejectedError struct{ detail string }

// Reject returns an error matching [ErrRejected] and [ErrInvalid] whose
// detail (what was refused and why, naming no secret) becomes the failed
// payment's reason. Providers use it for requests they refuse as invalid.
func Reject(detail string) error { return &rejectedError{detail: detail} }

func (e *rejectedError) Error() string { return ErrRejected.Error() + ": " + e.detail }

func (e *rejectedError) Unwrap() []error { return []error{ErrRejected, ErrInvalid} }

// FailedError says that an order's payment ended without a charge: the
// order is PAYMENT_FAILED. It matches [ErrDeclined], and [ErrRejected] when
// the provider refused the request itself.
type FailedError struct {
	OrderID          string
	PaymentRequestID string
	// Rejected is true when the provider refused the request itself
	// rather than declining the charge.
	Rejected bool
	// Reason is the refusal of a rejected request, as the payment row
	// records it; empty for a plain decline.
	Reason string
}

// Error describes the failed payment.
func (e *FailedError) Error() string {
	msg := ErrDeclined.Error() + ": order " + e.OrderID + " (payment request " + e.PaymentRequestID + ")"
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// Unwrap returns ErrDeclined, and ErrRejected for a rejected request.
func (e *FailedError) Unwrap() []error {
	if e.Rejected {
		return []error{ErrDeclined, ErrRejected}
	}
	return []error{ErrDeclined}
}

// PendingError says that an order's payment has no known outcome yet. It
// matches [ErrPending], and its cause (for instance [ErrTimeout]) too.
type PendingError struct {
	OrderID          string
	PaymentRequestID string
	// Cause is why the outcome is unknown; nil when another call is
	// already paying the order or the provider answered PENDING.
	Cause error
	// Reason says in one sentence, fit for the client and the log, why
	// the payment is still open and what settles it; it names no address
	// or secret.
	Reason string
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
