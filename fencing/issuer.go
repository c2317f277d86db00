package fencing

import (
	"context"
	"fmt"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Schema is the DDL of the table that backs [Issuer]. It is idempotent
// (CREATE TABLE IF NOT EXISTS), so it can run on every start. Applications
// that manage their schema with migrations should include it verbatim.
const Schema = `CREATE TABLE IF NOT EXISTS fence_counters (
    resource text PRIMARY KEY,
    value    bigint NOT NULL CHECK (value > 0)
);`

// MaxKeyLen is the longest resource key, in bytes, that [Issuer.Next] accepts.
const MaxKeyLen = 1024

// nextSQL allocates the next token for a resource. The upsert takes the row
// lock, so concurrent callers are serialized and each sees its own value.
const nextSQL = `INSERT INTO fence_counters (resource, value) VALUES ($1, 1)
ON CONFLICT (resource) DO UPDATE SET value = fence_counters.value + 1
RETURNING value`

// Querier is the subset of a Postgres connection that this package uses.
// *pgxpool.Pool, *pgx.Conn and pgx.Tx satisfy it.
type Querier interface {
	// Exec runs a statement that returns no rows.
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	// QueryRow runs a statement that returns at most one row.
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Issuer hands out fencing tokens that are durable and strictly increasing
// per resource key. It is safe for concurrent use.
//
// Its method set satisfies the quorum package's Fencer interface:
//
//	interface{ Next(ctx context.Context, key string) (int64, error) }
type Issuer struct {
	db Querier
}

// NewIssuer returns an Issuer that stores its counters in db, which should
// normally be a *pgxpool.Pool: each call to Next then commits on its own,
// before the token is used anywhere. If db is a transaction, the token is
// only durable once that transaction commits, and the counter row stays
// locked until then.
//
// The fence_counters table must exist; see [Schema] and [EnsureSchema].
func NewIssuer(db Querier) (*Issuer, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil database", ErrInvalid)
	}
	return &Issuer{db: db}, nil
}

// Next returns the next token for key: 1 for a key never seen before, then
// one more than the previous token, even across restarts and concurrent
// callers. The key must be 1 to [MaxKeyLen] bytes of valid UTF-8 without NUL
// bytes; any other key is rejected with an error wrapping [ErrInvalid] and
// nothing is written.
//
// A token may be lost (allocated but never used), for instance when the
// caller crashes after Next returns; the sequence then has a gap, which is
// harmless: only the order matters.
func (i *Issuer) Next(ctx context.Context, key string) (int64, error) {
	if err := validateKey(key); err != nil {
		return 0, err
	}
	var v int64
	if err := i.db.QueryRow(ctx, nextSQL, key).Scan(&v); err != nil {
		return 0, fmt.Errorf("fencing: next token for %q: %w", key, err)
	}
	return v, nil
}

// EnsureSchema creates the fence_counters table when it does not exist.
func EnsureSchema(ctx context.Context, db Querier) error {
	if db == nil {
		return fmt.Errorf("%w: nil database", ErrInvalid)
	}
	if _, err := db.Exec(ctx, Schema); err != nil {
		return fmt.Errorf("fencing: ensure schema: %w", err)
	}
	return nil
}

func validateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalid)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key is %d bytes, the limit is %d", ErrInvalid, len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: key is not valid UTF-8", ErrInvalid)
	case containsNUL(key):
		return fmt.Errorf("%w: key contains a NUL byte", ErrInvalid)
	}
	return nil
}

func containsNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}
