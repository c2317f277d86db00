package fencing

import (
	"fmt"
	"strconv"
	"strings"
)

// statements holds the SQL and arguments of one Update.
type statements struct {
	update     string
	updateArgs []any
	reread     string
	rereadArgs []any
}

// build validates u and renders its statements. ndest is the number of scan
// destinations the caller passed.
func (t *Table) build(u Update, ndest int) (statements, error) {
	if u.Fence <= 0 {
		return statements{}, fmt.Errorf("%w: fence %d is not positive", ErrInvalid, u.Fence)
	}
	if u.Key == nil {
		return statements{}, fmt.Errorf("%w: nil key", ErrInvalid)
	}
	if ndest != len(u.Returning) {
		return statements{}, fmt.Errorf("%w: %d returning columns but %d destinations", ErrInvalid, len(u.Returning), ndest)
	}

	var up args
	fenceP := up.add(u.Fence)
	keyP := up.add(u.Key)

	var sb strings.Builder
	sb.WriteString("UPDATE ")
	sb.WriteString(t.name)
	sb.WriteString(" SET ")
	if err := t.writeAssignments(&sb, &up, u.Set); err != nil {
		return statements{}, err
	}
	sb.WriteString(t.fence + " = " + fenceP)
	sb.WriteString(" WHERE " + t.key + " = " + keyP)

	var rr args
	rrKeyP := rr.add(u.Key)
	okExpr, err := t.writeConditions(&sb, &up, &rr, u.Where)
	if err != nil {
		return statements{}, err
	}
	if u.Claimed {
		sb.WriteString(" AND " + t.fence + " = " + fenceP)
	} else {
		sb.WriteString(" AND " + t.fence + " < " + fenceP)
	}
	sb.WriteString(" RETURNING " + t.fence)
	for _, col := range u.Returning {
		if err := validateIdent("returning column", col); err != nil {
			return statements{}, err
		}
		sb.WriteString(", " + quote(col))
	}

	ok := "true"
	if len(okExpr) > 0 {
		ok = "COALESCE((" + strings.Join(okExpr, " AND ") + "), false)"
	}
	reread := "SELECT " + t.fence + ", " + ok + " FROM " + t.name + " WHERE " + t.key + " = " + rrKeyP
	return statements{update: sb.String(), updateArgs: up.vals, reread: reread, rereadArgs: rr.vals}, nil
}

// writeAssignments renders set as "column = expression, " items onto sb,
// their values bound in up.
func (t *Table) writeAssignments(sb *strings.Builder, up *args, set []Assignment) error {
	seen := make(map[string]bool, len(set))
	for _, a := range set {
		if err := t.checkColumn("assignment", a.column); err != nil {
			return err
		}
		if seen[a.column] {
			return fmt.Errorf("%w: column %q assigned twice", ErrInvalid, a.column)
		}
		seen[a.column] = true
		c := quote(a.column)
		sb.WriteString(c)
		sb.WriteString(" = ")
		switch a.op {
		case opSet:
			sb.WriteString(up.add(a.value))
		case opAdd:
			sb.WriteString(c + " + " + up.add(a.value))
		case opSub:
			sb.WriteString(c + " - " + up.add(a.value))
		case opNow:
			sb.WriteString("now()")
		default:
			return fmt.Errorf("%w: zero Assignment for column %q; use Set, Add, Sub or SetNow", ErrInvalid, a.column)
		}
		sb.WriteString(", ")
	}
	return nil
}

// writeConditions renders where as " AND column op value" onto sb, its
// values bound in up, and returns the same conditions bound in rr for the
// re-read.
func (t *Table) writeConditions(sb *strings.Builder, up, rr *args, where []Condition) ([]string, error) {
	okExpr := make([]string, 0, len(where))
	for _, c := range where {
		if err := t.checkColumn("condition", c.column); err != nil {
			return nil, err
		}
		if !validOp(c.op) {
			return nil, fmt.Errorf("%w: zero Condition for column %q; use Eq, Ne, Lt, Le, Gt or Ge", ErrInvalid, c.column)
		}
		q := quote(c.column)
		sb.WriteString(" AND " + q + " " + c.op + " " + up.add(c.value))
		okExpr = append(okExpr, q+" "+c.op+" "+rr.add(c.value))
	}
	return okExpr, nil
}

// checkColumn validates a column named in an assignment or a condition: the
// key and the fence columns are reserved, because the write owns them.
func (t *Table) checkColumn(what, col string) error {
	if err := validateIdent(what+" column", col); err != nil {
		return err
	}
	switch col {
	case t.fenceCol:
		return fmt.Errorf("%w: %s on the fence column %q; the fence is managed by Update", ErrInvalid, what, col)
	case t.keyCol:
		if what == "assignment" {
			return fmt.Errorf("%w: assignment to the key column %q", ErrInvalid, col)
		}
	}
	return nil
}

func validOp(op string) bool {
	switch op {
	case "=", "<>", "<", "<=", ">", ">=":
		return true
	}
	return false
}

// args collects bind parameters and hands out their placeholders.
type args struct{ vals []any }

func (a *args) add(v any) string {
	a.vals = append(a.vals, v)
	return "$" + strconv.Itoa(len(a.vals))
}
