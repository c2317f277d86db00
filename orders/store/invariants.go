package store

import (
	"context"
	"database/sql/driver"
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// invariantsSQL holds the named invariant queries. Operators run the same
// file with psql (see docs/OPERATIONS.md).
//
//go:embed invariants.sql
var invariantsSQL string

// Names of the invariants [CheckInvariants] checks, as they appear in
// [Violation.Invariant] and on the "-- name:" lines of invariants.sql.
const (
	// InvariantNonNegativeStock: no product_stock.available below zero.
	// The CHECK constraint forbids it; a violation means the schema was
	// bypassed.
	InvariantNonNegativeStock = "non_negative_stock"

	// InvariantOneOrderPerKey: at most one order per (user_id,
	// idempotency_key). The UNIQUE constraint forbids a second one; a
	// violation means a restored or hand-edited database lost it.
	InvariantOneOrderPerKey = "one_order_per_idempotency_key"

	// InvariantStockBalance: for every product, available plus the
	// quantities of its order lines in a state that holds stock (every state
	// but CANCELLED, see [Status.Holds]) equals product_stock.stocked, the
	// units put in by [Store.SeedProduct]. A violation means stock moved
	// without an order: leaked, sold twice, or changed by hand.
	InvariantStockBalance = "stock_balance"

	// InvariantOrderLinesAddUp: every order has lines, its quantity and
	// amount are theirs, and only a one-line order names a product.
	InvariantOrderLinesAddUp = "order_lines_add_up"

	// InvariantOneChargePerPaymentRequest: no payment request is charged
	// twice. The provider's own ledger is not in the database, so the check
	// is on what the database records of charges: one payments row per
	// payment request id (the primary key), at most one SUCCEEDED payment
	// per order (a second one is the order charged under another request
	// id), and at most one provider reference of a successful charge per
	// payment request, across its payments row and its provider callbacks
	// in payment_events (a provider idempotent on the request id reports
	// its one charge under one reference).
	InvariantOneChargePerPaymentRequest = "one_charge_per_payment_request"
)

// invariantNames lists the invariants in the order of invariants.sql.
func invariantNames() []string {
	return []string{
		InvariantNonNegativeStock,
		InvariantOneOrderPerKey,
		InvariantStockBalance,
		InvariantOrderLinesAddUp,
		InvariantOneChargePerPaymentRequest,
	}
}

// Violation is one row that breaks an invariant.
type Violation struct {
	// Invariant is the name of the broken invariant, one of the Invariant
	// constants.
	Invariant string
	// Detail describes the offending row as column=value pairs, in the
	// query's column order, for instance "product_id=42 available=-1";
	// a string that is empty or holds whitespace, a quote or an equals
	// sign is quoted, and SQL NULL reads NULL.
	Detail string
}

// String returns "invariant: detail".
func (v Violation) String() string { return v.Invariant + ": " + v.Detail }

// Beginner starts the transaction [CheckInvariants] reads in.
// *pgxpool.Pool and *pgx.Conn satisfy it, and so does pgx.Tx, whose Begin
// opens a savepoint: the checks then see what that transaction sees.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// invariantQuery is one named query of invariants.sql.
type invariantQuery struct {
	name, sql string
}

// CheckInvariants runs every invariant query of invariants.sql on db and
// returns all the violations found, invariant by invariant in the order of
// the Invariant constants; none, and a nil error, when the database is
// healthy.
//
// It only reads: the queries run in a transaction (a savepoint when db is
// a pgx.Tx) made read-only before the first of them, which is always
// rolled back, so the caller's transaction is left as it was. Each query
// is one statement and sees one snapshot; pass a REPEATABLE READ
// transaction to have all four see the same one.
//
// An error (wrapping the driver's) means a check could not run; the
// violations found before it are returned with it.
func CheckInvariants(ctx context.Context, db Beginner) ([]Violation, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil database", ErrInvalid)
	}
	queries, err := parseInvariants(invariantsSQL)
	if err != nil {
		return nil, err
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: check invariants: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SET TRANSACTION READ ONLY`); err != nil {
		return nil, fmt.Errorf("store: check invariants: read only: %w", err)
	}
	var out []Violation
	for _, q := range queries {
		vs, err := checkInvariant(ctx, tx, q)
		out = append(out, vs...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// checkInvariant runs one query and turns each row into a Violation.
func checkInvariant(ctx context.Context, tx pgx.Tx, q invariantQuery) ([]Violation, error) {
	rows, err := tx.Query(ctx, q.sql)
	if err != nil {
		return nil, fmt.Errorf("store: check invariant %s: %w", q.name, err)
	}
	defer rows.Close()
	var out []Violation
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return out, fmt.Errorf("store: check invariant %s: %w", q.name, err)
		}
		var b strings.Builder
		for i, f := range rows.FieldDescriptions() {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(f.Name)
			b.WriteByte('=')
			b.WriteString(formatValue(vals[i]))
		}
		out = append(out, Violation{Invariant: q.name, Detail: b.String()})
	}
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("store: check invariant %s: %w", q.name, err)
	}
	return out, nil
}

// formatValue renders one column value of a violating row: NULL, a
// number, or a string (quoted when it is empty or holds whitespace, a
// quote or an equals sign, so that the pairs of a Detail stay apart).
func formatValue(v any) string {
	if dv, ok := v.(driver.Valuer); ok {
		// pgtype values (numeric, for one) render through their SQL value.
		if sv, err := dv.Value(); err == nil {
			v = sv
		}
	}
	switch v := v.(type) {
	case nil:
		return "NULL"
	case string:
		if v == "" || strings.ContainsAny(v, " \t\n\"=") {
			return strconv.Quote(v)
		}
		return v
	case []byte:
		return strconv.Quote(string(v))
	}
	return fmt.Sprint(v)
}

// nameLine starts each query of invariants.sql.
const nameLine = "-- name:"

// parseInvariants splits src at its "-- name:" lines into named queries
// (the text before the first is the file's header) and checks that they
// are exactly the invariants of invariantNames, in order, each ending with
// a semicolon.
func parseInvariants(src string) ([]invariantQuery, error) {
	var out []invariantQuery
	for line := range strings.Lines(src) {
		if name, ok := strings.CutPrefix(line, nameLine); ok {
			out = append(out, invariantQuery{name: strings.TrimSpace(name)})
			continue
		}
		if len(out) > 0 {
			out[len(out)-1].sql += line
		}
	}
	names := make([]string, len(out))
	for i := range out {
		names[i] = out[i].name
		out[i].sql = strings.TrimSpace(out[i].sql)
		if !strings.HasSuffix(out[i].sql, ";") {
			return nil, fmt.Errorf("store: invariants.sql: query %q does not end with a semicolon", out[i].name)
		}
	}
	if want := invariantNames(); !slices.Equal(names, want) {
		return nil, fmt.Errorf("store: invariants.sql names %q, want %q", names, want)
	}
	return out, nil
}
