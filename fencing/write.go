package fencing

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/quorumlock/quorumlock/internal/option"
)

// DefaultFenceColumn is the fence column of a [Table] unless
// [WithFenceColumn] says otherwise.
const DefaultFenceColumn = "last_fence"

// maxIdentLen is Postgres' NAMEDATALEN-1: longer identifiers are truncated
// by the server, which would silently address another column.
const maxIdentLen = 63

// maxAttempts bounds how often Update retries when the re-read shows a row
// that would now accept the write (its condition turned true between the
// UPDATE and the re-read, under READ COMMITTED).
const maxAttempts = 3

// Table describes a table whose rows are protected by a fence column. Build
// it once with [NewTable]; it is immutable and safe for concurrent use.
type Table struct {
	name     string // quoted, possibly schema-qualified
	keyCol   string // unquoted
	fenceCol string // unquoted
	key      string // quoted
	fence    string // quoted
}

// TableOption configures [NewTable]. A nil option is an error wrapping
// [ErrInvalid].
type TableOption func(*tableConfig) error

type tableConfig struct {
	schema string
	fence  string
}

// WithSchema qualifies the table with a schema name.
func WithSchema(schema string) TableOption {
	return func(c *tableConfig) error {
		if err := validateIdent("schema", schema); err != nil {
			return err
		}
		c.schema = schema
		return nil
	}
}

// WithFenceColumn names the bigint column that records the highest fence the
// row accepted. The default is [DefaultFenceColumn].
func WithFenceColumn(column string) TableOption {
	return func(c *tableConfig) error {
		if err := validateIdent("fence column", column); err != nil {
			return err
		}
		c.fence = column
		return nil
	}
}

// NewTable describes table, whose rows are addressed by keyColumn (normally
// the primary key). Names are taken verbatim (case-sensitive) and quoted as
// identifiers; a name that is empty, longer than 63 bytes, not UTF-8 or
// containing a NUL byte is rejected with an error wrapping [ErrInvalid], as
// is a nil option.
func NewTable(table, keyColumn string, opts ...TableOption) (*Table, error) {
	if err := validateIdent("table", table); err != nil {
		return nil, err
	}
	if err := validateIdent("key column", keyColumn); err != nil {
		return nil, err
	}
	cfg := tableConfig{fence: DefaultFenceColumn}
	if err := option.Apply(&cfg, opts, ErrInvalid); err != nil {
		return nil, err
	}
	if cfg.fence == keyColumn {
		return nil, fmt.Errorf("%w: key column and fence column are both %q", ErrInvalid, keyColumn)
	}
	ident := pgx.Identifier{table}
	if cfg.schema != "" {
		ident = pgx.Identifier{cfg.schema, table}
	}
	return &Table{
		name:     ident.Sanitize(),
		keyCol:   keyColumn,
		fenceCol: cfg.fence,
		key:      quote(keyColumn),
		fence:    quote(cfg.fence),
	}, nil
}

// Name returns the quoted table name.
func (t *Table) Name() string { return t.name }

// Assignment is one "column = expression" of a fenced write. Build it with
// [Set], [Add], [Sub] or [SetNow].
type Assignment struct {
	column string
	op     assignOp
	value  any
}

type assignOp uint8

const (
	opSet assignOp = iota + 1
	opAdd
	opSub
	opNow
)

// Set assigns value to column.
func Set(column string, value any) Assignment {
	return Assignment{column: column, op: opSet, value: value}
}

// Add adds delta to column (column = column + delta).
func Add(column string, delta any) Assignment {
	return Assignment{column: column, op: opAdd, value: delta}
}

// Sub subtracts delta from column (column = column - delta).
func Sub(column string, delta any) Assignment {
	return Assignment{column: column, op: opSub, value: delta}
}

// SetNow assigns the transaction's timestamp, now(), to column.
func SetNow(column string) Assignment {
	return Assignment{column: column, op: opNow}
}

// Condition is one business condition of a fenced write, such as
// available >= quantity. Conditions are combined with AND. Build them with
// [Eq], [Ne], [Lt], [Le], [Gt] or [Ge]. A comparison with NULL counts as
// false.
type Condition struct {
	column string
	op     string
	value  any
}

// Eq requires column = value.
func Eq(column string, value any) Condition { return Condition{column, "=", value} }

// Ne requires column <> value.
func Ne(column string, value any) Condition { return Condition{column, "<>", value} }

// Lt requires column < value.
func Lt(column string, value any) Condition { return Condition{column, "<", value} }

// Le requires column <= value.
func Le(column string, value any) Condition { return Condition{column, "<=", value} }

// Gt requires column > value.
func Gt(column string, value any) Condition { return Condition{column, ">", value} }

// Ge requires column >= value.
func Ge(column string, value any) Condition { return Condition{column, ">=", value} }

// Update is one fenced write to a single row.
type Update struct {
	// Key is the value of the table's key column for the target row.
	Key any
	// Fence is the writer's fencing token. It must be positive.
	Fence int64
	// Set lists the assignments besides the fence column, which is always
	// set to Fence. It may be empty, which only records the fence.
	Set []Assignment
	// Where lists business conditions that must all hold, besides the
	// fence check. It may be empty.
	Where []Condition
	// Returning names columns whose new values are scanned into the dest
	// arguments of [Table.Update], in order.
	Returning []string
	// Claimed makes this the write half of a fenced read-modify-write: the
	// row must still carry exactly Fence, recorded by a [Table.Claim] with
	// the same fence, so no newer holder has read or written it since. A
	// row claimed by a higher fence rejects the write with [ErrStaleFence];
	// a row never claimed by this fence, with [ErrNotClaimed].
	Claimed bool
}

// Update performs u on the row whose key column equals u.Key, through q
// (a pool, a connection or the caller's transaction):
//
//	UPDATE t SET <u.Set>, fence = u.Fence
//	WHERE key = u.Key AND <u.Where> AND fence < u.Fence
//	RETURNING <u.Returning>
//
// On success the returned columns are scanned into dest, which must have
// one destination per u.Returning entry.
//
// When no row changes, the row is re-read through q and the error is a
// [*RejectedError] matching [ErrStaleFence] (its fence is at or above
// u.Fence; this wins over a failed condition), [ErrNotFound] (no row) or
// [ErrConditionFailed] (a condition in u.Where was false). Nothing is
// written in any of these cases. If the re-read finds a row that would now
// accept the write, because a concurrent transaction changed it in between,
// the write is attempted again, a bounded number of times.
//
// Invalid input (a fence that is not positive, a nil key, an unusable or
// reserved column name, a column assigned twice, a dest count that does not
// match) is rejected with an error wrapping [ErrInvalid] before anything is
// sent. Database errors are returned wrapped; in a transaction they leave it
// aborted, as usual.
func (t *Table) Update(ctx context.Context, q Querier, u Update, dest ...any) error {
	if q == nil {
		return fmt.Errorf("%w: nil querier", ErrInvalid)
	}
	st, err := t.build(u, len(dest))
	if err != nil {
		return err
	}
	scan := make([]any, 0, len(dest)+1)
	var fence int64
	scan = append(scan, &fence)
	scan = append(scan, dest...)

	for attempt := 1; ; attempt++ {
		err := q.QueryRow(ctx, st.update, st.updateArgs...).Scan(scan...)
		if err == nil {
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("fencing: update %s key %v: %w", t.name, u.Key, err)
		}
		rej, retry, err := t.classify(ctx, q, st, u)
		if err != nil {
			return err
		}
		if !retry || attempt >= maxAttempts {
			return rej
		}
	}
}

// classify re-reads the row after a write that changed nothing. retry is
// true when the row now satisfies both the fence and the conditions; rej is
// then the best explanation should the caller stop retrying.
func (t *Table) classify(ctx context.Context, q Querier, st statements, u Update) (rej *RejectedError, retry bool, err error) {
	var (
		current int64
		ok      bool
	)
	err = q.QueryRow(ctx, st.reread, st.rereadArgs...).Scan(&current, &ok)
	rej = &RejectedError{Table: t.name, Key: u.Key, Fence: u.Fence, Current: current}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		rej.Reason, rej.Current = ErrNotFound, 0
		return rej, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("fencing: re-read %s key %v: %w", t.name, u.Key, err)
	case u.Claimed && current > u.Fence, !u.Claimed && current >= u.Fence:
		rej.Reason = ErrStaleFence
		return rej, false, nil
	case u.Claimed && current < u.Fence:
		rej.Reason = ErrNotClaimed
		return rej, false, nil
	default:
		// The condition was false when the UPDATE evaluated it. If it holds
		// now, the row changed in between and the write may succeed.
		rej.Reason = ErrConditionFailed
		return rej, ok, nil
	}
}

// validateIdent rejects names that cannot be used safely as one identifier.
func validateIdent(what, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty %s name", ErrInvalid, what)
	case len(name) > maxIdentLen:
		return fmt.Errorf("%w: %s name %q is longer than %d bytes", ErrInvalid, what, name, maxIdentLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: %s name is not valid UTF-8", ErrInvalid, what)
	case containsNUL(name):
		return fmt.Errorf("%w: %s name contains a NUL byte", ErrInvalid, what)
	}
	return nil
}

func quote(name string) string { return pgx.Identifier{name}.Sanitize() }
