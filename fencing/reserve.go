package fencing

import (
	"context"
	"fmt"
)

// Reserver hands out reserved fencing tokens: Next reads the token the
// next increment of a key's counter would give, and writes nothing; the
// holder takes it with [Take] in the transaction that writes the
// resource, which succeeds only while no token has been taken for the key
// since. It satisfies the quorum package's Fencer interface, so a lease
// gets its fence within its validity without a commit of its own, and the
// counter moves in the same commit as the write it fences.
//
// Two holders may reserve the same number (the second reserved before the
// first took it): at most one of them takes it, and the other's Take
// fails with [ErrStaleFence], rolling its transaction back. So, as with
// [Issuer], writes that commit carry strictly increasing tokens per key,
// and a holder whose lease was superseded by one that wrote cannot write.
// [Issuer.Next] on the same counter (a writer that takes its token inside
// its own transaction) makes every reservation taken before it stale.
type Reserver struct {
	db Querier
}

// NewReserver returns a Reserver on the counters in db (a pool: Next is a
// read). The fence_counters table must exist; see [Schema].
func NewReserver(db Querier) (*Reserver, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil database", ErrInvalid)
	}
	return &Reserver{db: db}, nil
}

// Next returns the token key's counter would give next: 1 for a key never
// seen, else one more than its last token. It writes nothing; [Take] makes
// it the key's last token. The key is checked as for [Issuer.Next].
func (r *Reserver) Next(ctx context.Context, key string) (int64, error) {
	if err := validateKey(key); err != nil {
		return 0, err
	}
	var v int64
	err := r.db.QueryRow(ctx, `SELECT COALESCE((SELECT value FROM fence_counters WHERE resource = $1), 0) + 1`, key).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("fencing: reserve a token for %q: %w", key, err)
	}
	return v, nil
}

// Take makes fence, reserved by [Reserver.Next], key's last token, through
// q (the caller's transaction, so that it commits with the write it
// fences, and the counter row stays locked until then). It fails with an
// error matching [ErrStaleFence], writing nothing, when a token at or
// above fence was taken for the key since the reservation.
func Take(ctx context.Context, q Querier, key string, fence int64) error {
	if err := validateKey(key); err != nil {
		return err
	}
	if q == nil || fence <= 0 {
		return fmt.Errorf("%w: take fence %d with a nil querier or a fence that is not positive", ErrInvalid, fence)
	}
	tag, err := q.Exec(ctx, `INSERT INTO fence_counters (resource, value) VALUES ($1, $2)
ON CONFLICT (resource) DO UPDATE SET value = EXCLUDED.value WHERE fence_counters.value < EXCLUDED.value`, key, fence)
	if err != nil {
		return fmt.Errorf("fencing: take token %d for %q: %w", fence, key, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("fencing: take token %d for %q: %w", fence, key, ErrStaleFence)
	}
	return nil
}
