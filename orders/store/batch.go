package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/quorumlock/quorumlock/fencing"
)

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
// a cart line's Fence and FenceKey say.
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
