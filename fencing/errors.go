package fencing

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalid reports a bad argument: an empty key, a fence that is not
	// positive, an unusable identifier, and so on. Nothing is written.
	ErrInvalid = errors.New("fencing: invalid argument")

	// ErrStaleFence reports a fenced write whose fence is not higher than the
	// last fence the row accepted: the writer's lease was superseded.
	ErrStaleFence = errors.New("fencing: stale fence")

	// ErrConditionFailed reports a fenced write whose fence was current but
	// whose business condition (for example "available >= quantity") was
	// false.
	ErrConditionFailed = errors.New("fencing: condition failed")

	// ErrNotFound reports a fenced write whose target row does not exist.
	ErrNotFound = errors.New("fencing: row not found")

	// ErrNotClaimed reports a claimed write ([Update.Claimed]) to a row that
	// its fence never claimed: no [Table.Claim] with that fence went first.
	ErrNotClaimed = errors.New("fencing: row not claimed by this fence")
)

// RejectedError explains why a fenced write changed nothing. It matches
// exactly one of [ErrStaleFence], [ErrConditionFailed], [ErrNotFound] and
// [ErrNotClaimed] with errors.Is; use errors.As to read the details.
type RejectedError struct {
	// Reason is ErrStaleFence, ErrConditionFailed, ErrNotFound or
	// ErrNotClaimed.
	Reason error
	// Table is the quoted name of the table.
	Table string
	// Key is the key value the write addressed.
	Key any
	// Fence is the fence the write carried.
	Fence int64
	// Current is the row's fence when it was re-read after the write
	// failed; 0 when the row does not exist.
	Current int64
}

// Error describes the rejection.
func (e *RejectedError) Error() string {
	switch {
	case errors.Is(e.Reason, ErrStaleFence):
		return fmt.Sprintf("%v: %s key %v: fence %d is not above current %d", e.Reason, e.Table, e.Key, e.Fence, e.Current)
	case errors.Is(e.Reason, ErrNotFound):
		return fmt.Sprintf("%v: %s key %v", e.Reason, e.Table, e.Key)
	default:
		return fmt.Sprintf("%v: %s key %v (fence %d, current %d)", e.Reason, e.Table, e.Key, e.Fence, e.Current)
	}
}

// Unwrap returns the reason, so errors.Is matches the sentinel.
func (e *RejectedError) Unwrap() error { return e.Reason }
