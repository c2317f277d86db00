package store

import (
	"fmt"

	"github.com/quorumlock/quorumlock/orders/request"
)

// MaxBatch is the most carts one placement transaction takes.
const MaxBatch = 256

// OrderRequest is who asks for an order (a cart of one line or more),
// under which key, for how many units in all, and the id a new order gets.
type OrderRequest struct {
	// UserID is the authenticated user (1 to request.MaxUserIDLen bytes).
	UserID string
	// IdempotencyKey is the client's key, checked where it entered.
	IdempotencyKey request.Key
	// Fingerprint identifies the request's business content.
	Fingerprint string
	// Quantity is the units of every line of the cart.
	Quantity int64
	// OrderID is the id a new order gets (1 to MaxRefLen bytes); a replay
	// keeps the saved order's.
	OrderID string
}

// Placed is the result of one order of a batch: its outcome and nil (a new
// or replayed order), ErrOutOfStock (a new or replayed rejection, whose
// snapshot is in the outcome) or ErrFingerprintMismatch (the key was used
// for another request; nothing written).
type Placed struct {
	Outcome Outcome
	Err     error
}

func (o OrderRequest) validate() error {
	if err := checkText("user id", o.UserID, request.MaxUserIDLen); err != nil {
		return err
	}
	if o.IdempotencyKey.IsZero() {
		return fmt.Errorf("%w: no idempotency key", ErrInvalid)
	}
	if err := checkText("fingerprint", o.Fingerprint, MaxFingerprintLen); err != nil {
		return err
	}
	if o.Quantity < request.MinQuantity || o.Quantity > request.MaxQuantity {
		return fmt.Errorf("%w: quantity %d is outside %d..%d", ErrInvalid, o.Quantity, request.MinQuantity, request.MaxQuantity)
	}
	return checkText("order id", o.OrderID, MaxRefLen)
}
