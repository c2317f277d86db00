package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// SaveOutOfStock saves the out-of-stock outcome of each order of b whose
// (user, key) has no saved outcome yet, in one transaction, without
// touching the stock: the write behind the sold-out fast path, for a
// product that Postgres has just reported sold out. The keys are locked as
// PlaceBatch locks them, so neither can save a second outcome for a key
// the other is placing. It returns, per order, the saved outcome and
// ErrOutOfStock, or a zero Placed for an order whose key already had an
// outcome: that one must take the normal path, which replays it. b.Fence
// and b.FenceKey are not used.
func (s *Store) SaveOutOfStock(ctx context.Context, b Batch) ([]Placed, error) {
	b.FenceKey = "unused" // no fence is taken: nothing here writes the stock
	if err := b.validate(); err != nil {
		return nil, err
	}
	out := make([]Placed, len(b.Orders))
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockKeys(ctx, tx, b.Orders); err != nil {
			return err
		}
		saved, err := lookupMany(ctx, tx, b.Orders)
		if err != nil {
			return err
		}
		now := time.Now().UTC().Truncate(time.Microsecond)
		var fresh []Outcome
		var idx []int
		seen := map[outcomeKey]bool{}
		for i, o := range b.Orders {
			k := outcomeKey{o.UserID, o.IdempotencyKey.String()}
			if hasKey(saved, k) || seen[k] {
				continue // replayed by the normal path
			}
			seen[k] = true
			fresh = append(fresh, shortOutcome(b, o, now))
			idx = append(idx, i)
		}
		if err := saveShort(ctx, tx, fresh); err != nil {
			return err
		}
		for j, i := range idx {
			out[i] = Placed{Outcome: fresh[j], Err: outOfStockErr(b.ProductID, b.Orders[i].Quantity)}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: save out-of-stock outcomes: %w", err)
	}
	return out, nil
}
