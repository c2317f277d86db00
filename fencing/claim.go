package fencing

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Claim is the read half of a fenced read-modify-write. It records fence on
// the row whose key column equals key and returns the named columns, in one
// statement:
//
//	UPDATE t SET fence = $fence WHERE key = $key AND fence < $fence
//	RETURNING <columns>
//
// A holder that reads a value, works on it and writes back a result needs
// this: a plain read followed by a fenced write lets two holders read the
// same value, and both writes then pass the fence check in fence order, so
// one update is lost. Once the row carries the claim, every holder with a
// lower fence is rejected, and the holder's own write goes through
// [Table.Update] with [Update.Claimed] set, which succeeds only while the
// row still carries exactly this fence.
//
// The returned columns are scanned into dest, one per column. A row that
// already carries fence or a higher one is rejected with a [*RejectedError]
// matching [ErrStaleFence], a missing row with [ErrNotFound]; nothing is
// written in either case. Invalid input is rejected with an error wrapping
// [ErrInvalid] before anything is sent.
func (t *Table) Claim(ctx context.Context, q Querier, key any, fence int64, columns []string, dest ...any) error {
	switch {
	case q == nil:
		return fmt.Errorf("%w: nil querier", ErrInvalid)
	case fence <= 0:
		return fmt.Errorf("%w: fence %d is not positive", ErrInvalid, fence)
	case key == nil:
		return fmt.Errorf("%w: nil key", ErrInvalid)
	case len(columns) != len(dest):
		return fmt.Errorf("%w: %d columns but %d destinations", ErrInvalid, len(columns), len(dest))
	}
	var sb strings.Builder
	sb.WriteString("UPDATE " + t.name + " SET " + t.fence + " = $1 WHERE " + t.key + " = $2 AND " + t.fence + " < $1 RETURNING " + t.fence)
	for _, c := range columns {
		if err := validateIdent("claimed column", c); err != nil {
			return err
		}
		sb.WriteString(", " + quote(c))
	}
	scan := make([]any, 0, len(dest)+1)
	var got int64
	scan = append(append(scan, &got), dest...)
	err := q.QueryRow(ctx, sb.String(), fence, key).Scan(scan...)
	if err == nil {
		return nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("fencing: claim %s key %v: %w", t.name, key, err)
	}
	rej := &RejectedError{Table: t.name, Key: key, Fence: fence}
	err = q.QueryRow(ctx, "SELECT "+t.fence+" FROM "+t.name+" WHERE "+t.key+" = $1", key).Scan(&rej.Current)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		rej.Reason = ErrNotFound
	case err != nil:
		return fmt.Errorf("fencing: re-read %s key %v: %w", t.name, key, err)
	default:
		// The fence column only grows, so a row that refused the claim
		// still carries a fence at or above it.
		rej.Reason = ErrStaleFence
	}
	return rej
}
