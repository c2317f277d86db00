package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// This file builds and reads the rows of a batch: the saved outcomes of
// its keys, the new orders and rejections, and their column arrays.

// outcomeKey is the (user, idempotency key) an outcome is saved under.
type outcomeKey [2]string

// lookupMany reads the saved outcome of every (user, key) of orders: an
// order, or else a saved rejection.
func lookupMany(ctx context.Context, tx pgx.Tx, orders []OrderRequest) (map[outcomeKey]Outcome, error) {
	users, keys := make([]string, len(orders)), make([]string, len(orders))
	for i, o := range orders {
		users[i], keys[i] = o.UserID, o.IdempotencyKey.String()
	}
	saved := make(map[outcomeKey]Outcome)
	rows, err := tx.Query(ctx, `SELECT `+orderColumns+`, response_status, response_body FROM orders
WHERE (user_id, idempotency_key) IN (SELECT * FROM unnest($1::text[], $2::text[]))`, users, keys)
	if err != nil {
		return nil, fmt.Errorf("store: lookup orders: %w", err)
	}
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Outcome, error) {
		var (
			o      Order
			status int
			body   []byte
		)
		err := scanOrder(r, &o, &status, &body)
		return orderOutcome(o, status, body), err
	})
	if err != nil {
		return nil, fmt.Errorf("store: lookup orders: %w", err)
	}
	for _, out := range found {
		saved[outcomeKey{out.UserID, out.IdempotencyKey}] = out
	}
	if len(saved) == len(orders) {
		return saved, nil
	}
	rows, err = tx.Query(ctx, `SELECT user_id, idempotency_key, request_fingerprint, outcome, COALESCE(product_id, ''), quantity,
  response_status, response_body, created_at FROM request_outcomes
WHERE (user_id, idempotency_key) IN (SELECT * FROM unnest($1::text[], $2::text[]))`, users, keys)
	if err != nil {
		return nil, fmt.Errorf("store: lookup outcomes: %w", err)
	}
	found, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Outcome, error) {
		var out Outcome
		err := r.Scan(&out.UserID, &out.IdempotencyKey, &out.Fingerprint, &out.Kind, &out.ProductID, &out.Quantity,
			&out.ResponseStatus, &out.ResponseBody, &out.CreatedAt)
		return out, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: lookup outcomes: %w", err)
	}
	for _, out := range found {
		if k := (outcomeKey{out.UserID, out.IdempotencyKey}); !hasKey(saved, k) {
			saved[k] = out
		}
	}
	return saved, nil
}

func hasKey(m map[outcomeKey]Outcome, k outcomeKey) bool {
	_, ok := m[k]
	return ok
}

// orderRows returns the column arrays of the new orders, for one INSERT
// over unnest.
func orderRows(made []Outcome) []any {
	n := len(made)
	ids, users, products, keys, fps, states := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	qty, amounts, fences := make([]int64, n), make([]int64, n), make([]int64, n)
	created, updated := make([]time.Time, n), make([]time.Time, n)
	statuses, bodies := make([]int32, n), make([][]byte, n)
	for i, m := range made {
		o := m.Order
		ids[i], users[i], products[i], qty[i], amounts[i], keys[i] = o.ID, o.UserID, o.ProductID, o.Quantity, o.AmountCents, o.IdempotencyKey
		fps[i], states[i], fences[i], created[i], updated[i] = o.Fingerprint, string(o.Status), o.Fence, o.CreatedAt, o.UpdatedAt
		statuses[i], bodies[i] = int32(m.ResponseStatus), m.ResponseBody
	}
	return []any{ids, users, products, qty, amounts, keys, fps, states, fences, created, updated, statuses, bodies}
}

// saveShort records the out-of-stock outcomes, so that they replay.
func saveShort(ctx context.Context, tx pgx.Tx, short []Outcome) error {
	if len(short) == 0 {
		return nil
	}
	n := len(short)
	users, keys, fps, kinds, products := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	qty, statuses, bodies, at := make([]int64, n), make([]int32, n), make([][]byte, n), make([]time.Time, n)
	for i, o := range short {
		users[i], keys[i], fps[i], kinds[i], products[i] = o.UserID, o.IdempotencyKey, o.Fingerprint, string(o.Kind), o.ProductID
		qty[i], statuses[i], bodies[i], at[i] = o.Quantity, int32(o.ResponseStatus), o.ResponseBody, o.CreatedAt
	}
	_, err := tx.Exec(ctx, `INSERT INTO request_outcomes (user_id, idempotency_key, request_fingerprint, outcome,
  product_id, quantity, response_status, response_body, created_at)
SELECT u, k, f, o, NULLIF(p, ''), q, s, b, t
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::int[], $8::bytea[], $9::timestamptz[])
  AS x(u, k, f, o, p, q, s, b, t)`,
		users, keys, fps, kinds, products, qty, statuses, bodies, at)
	if err != nil {
		return fmt.Errorf("store: place orders: save out-of-stock outcomes: %w", err)
	}
	return nil
}

// answerRepeats answers the orders whose key came earlier in the batch
// with the first one's outcome, as a replay.
func answerRepeats(orders []OrderRequest, out []Placed) {
	first := map[outcomeKey]int{}
	for i, o := range orders {
		k := outcomeKey{o.UserID, o.IdempotencyKey.String()}
		j, seen := first[k]
		if !seen {
			first[k] = i
			continue
		}
		if out[i].Outcome.Kind == "" && out[j].Outcome.Kind != "" {
			out[i].Outcome, out[i].Err = replay(out[j].Outcome, o.Fingerprint)
		}
	}
}
