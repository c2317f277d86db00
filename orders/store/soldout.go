package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// SaveOutOfStock saves the out-of-stock outcome of each cart whose (user,
// key) has no saved outcome yet, in one transaction, without touching the
// stock: the write behind the sold-out fast path, for carts whose every
// product Postgres has just reported sold out (each line is named short,
// with nothing available). The keys are locked as PlaceCarts locks them,
// so neither can save a second outcome for a key the other is placing. It
// returns, per cart, the saved outcome and ErrOutOfStock, or a zero Placed
// for a cart whose key already had an outcome: that one must take the
// normal path, which replays it. The lines' fences are not used.
func (s *Store) SaveOutOfStock(ctx context.Context, carts []Cart) ([]Placed, error) {
	if len(carts) == 0 || len(carts) > MaxBatch {
		return nil, fmt.Errorf("%w: %d carts in a batch, want 1..%d", ErrInvalid, len(carts), MaxBatch)
	}
	orders := make([]OrderRequest, len(carts))
	for i, c := range carts {
		c.Lines = slices.Clone(c.Lines)
		for j := range c.Lines {
			c.Lines[j].Fence, c.Lines[j].FenceKey = 0, "unused" // no fence is taken: nothing here writes the stock
		}
		if err := c.validate(); err != nil {
			return nil, err
		}
		orders[i] = c.Order
	}
	out := make([]Placed, len(carts))
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockKeys(ctx, tx, orders); err != nil {
			return err
		}
		saved, err := lookupMany(ctx, tx, orders)
		if err != nil {
			return err
		}
		now := time.Now().UTC().Truncate(time.Microsecond)
		var fresh []Outcome
		var idx []int
		seen := map[outcomeKey]bool{}
		for i, o := range orders {
			k := outcomeKey{o.UserID, o.IdempotencyKey.String()}
			if hasKey(saved, k) || seen[k] {
				continue // replayed by the normal path
			}
			seen[k] = true
			short := cartShortOutcome(carts[i], soldOutLines(carts[i]), now)
			if err := checkSnapshot(short); err != nil {
				return err
			}
			fresh = append(fresh, short)
			idx = append(idx, i)
		}
		if err := saveShort(ctx, tx, fresh); err != nil {
			return err
		}
		for j, i := range idx {
			out[i] = Placed{Outcome: fresh[j], Err: fmt.Errorf("%w: %d of the cart's lines", ErrOutOfStock, len(carts[i].Lines))}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: save out-of-stock outcomes: %w", err)
	}
	return out, nil
}

// soldOutLines names every line of c short, with nothing available.
func soldOutLines(c Cart) []ShortLine {
	short := make([]ShortLine, len(c.Lines))
	for i, l := range c.Lines {
		short[i] = ShortLine{ProductID: l.ProductID, Quantity: l.Quantity}
	}
	return short
}
