package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/quorumlock/quorumlock/fencing"
	"github.com/quorumlock/quorumlock/orders/request"
)

// MaxBatch is the most carts [Store.PlaceCarts] places in one transaction.
const MaxBatch = 256

// OrderRequest is who asks for a [Cart], under which key, for how many
// units in all, and the id a new order gets.
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

// lockKeys takes the advisory lock of every (user, key) of orders, sorted,
// so that batches sharing keys never deadlock.
func lockKeys(ctx context.Context, tx pgx.Tx, orders []OrderRequest) error {
	type pair struct{ u, k string }
	ps := make([]pair, len(orders))
	for i, o := range orders {
		ps[i] = pair{o.UserID, o.IdempotencyKey.String()}
	}
	slices.SortFunc(ps, func(a, b pair) int {
		if a.u != b.u {
			return compare(a.u, b.u)
		}
		return compare(a.k, b.k)
	})
	ps = slices.Compact(ps)
	users, keys := make([]string, len(ps)), make([]string, len(ps))
	for i, p := range ps {
		users[i], keys[i] = p.u, p.k
	}
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext(u), hashtext(k))
FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS t(u, k, n) ORDER BY n`, users, keys)
	if err != nil {
		return fmt.Errorf("store: place orders: lock keys: %w", err)
	}
	return nil
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// replays fills the results of the orders that have a saved outcome, or
// repeat an earlier key of the batch, and returns the indexes of the
// others, in order. A repeated key's result is filled in by
// answerRepeats, after the first one's.
func replays(ctx context.Context, tx pgx.Tx, orders []OrderRequest) ([]Placed, []int, error) {
	out := make([]Placed, len(orders))
	saved, err := lookupMany(ctx, tx, orders)
	if err != nil {
		return nil, nil, err
	}
	first := map[outcomeKey]int{}
	var fresh []int
	for i, o := range orders {
		k := outcomeKey{o.UserID, o.IdempotencyKey.String()}
		if sv, ok := saved[k]; ok {
			out[i].Outcome, out[i].Err = replay(sv, o.Fingerprint)
			continue
		}
		if _, dup := first[k]; dup {
			continue // answered after the first one
		}
		first[k] = i
		fresh = append(fresh, i)
	}
	return out, fresh, nil
}

// fence returns the token of a write to one stock row, taken as
// CartLine.Fence and CartLine.FenceKey say.
func (s *Store) fence(ctx context.Context, tx pgx.Tx, fence int64, key string) (int64, error) {
	switch {
	case fence > 0 && key != "":
		if err := fencing.Take(ctx, tx, key, fence); err != nil {
			return 0, fmt.Errorf("store: place orders: %w", err)
		}
		return fence, nil
	case fence > 0:
		return fence, nil
	}
	iss, err := fencing.NewIssuer(tx)
	if err != nil {
		return 0, err
	}
	f, err := iss.Next(ctx, key)
	if err != nil {
		return 0, fmt.Errorf("store: place orders: %w", err)
	}
	return f, nil
}
