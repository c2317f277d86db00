// Package audit judges the history of an order run: the rows of the orders
// table at its end, the stock of each product before and after, and the
// answers every client got to POST /orders. It is the after-the-fact
// verdict on the guarantees of package orders, and depends on the standard
// library alone, so tests, drills and the quorumbed demo can all use it. It
// is a development tool, kept under devtools/ where no production package
// reaches.
//
// [Orders] runs these checks, each named by its Check constant:
//   - one order per (user, idempotency key): no request was placed twice;
//   - stock never negative, and no product sold beyond its initial stock
//     (no oversell);
//   - stock balance: per product, the stock taken (initial minus final)
//     equals what the live (not cancelled) orders' lines hold (a cart holds
//     one line per product), so no decrement was lost or doubled, and no
//     cart was sold in part; every ordered product was stocked by the run;
//   - every final answer (a 201 or a saved 409) to one (user, key) is the
//     same, and every 201 names an order row of that same user and key
//     (and, when the answer's lines are known, with the same lines).
//
// [Effects] checks what was done outside the orders table on an order's
// behalf (an event published or consumed, a charge): each names an order
// that exists, and no order was charged twice.
//
// The tests of this package include negative controls: for each check, a
// history with a real violation that the check must catch.
package audit

import (
	"fmt"
	"slices"
	"strings"
)

// The checks of [Orders], as [Violation.Check] names them.
const (
	// CheckOneOrderPerKey: at most one order row per (user, idempotency key).
	CheckOneOrderPerKey = "one_order_per_key"
	// CheckNonNegativeStock: no product's final stock is below zero.
	CheckNonNegativeStock = "non_negative_stock"
	// CheckNoOversell: the live orders of a product hold no more than its
	// initial stock.
	CheckNoOversell = "no_oversell"
	// CheckStockBalance: the stock a product lost is exactly what its live
	// orders hold, and every ordered product was stocked by the run.
	CheckStockBalance = "stock_balance"
	// CheckSameAnswer: every final answer to one (user, key) is identical.
	CheckSameAnswer = "same_answer"
	// CheckAnswerMatchesRow: every 201 names an order row, of the same user
	// and idempotency key.
	CheckAnswerMatchesRow = "answer_matches_row"
)

// Checks returns the names of the checks [Orders] runs, in the order it
// runs them.
func Checks() []string {
	return []string{CheckOneOrderPerKey, CheckNonNegativeStock, CheckNoOversell, CheckStockBalance, CheckSameAnswer, CheckAnswerMatchesRow}
}

// OrderRow is one row of the orders table at the end of a run.
type OrderRow struct {
	OrderID        string
	UserID         string
	IdempotencyKey string
	// ProductID and Quantity are a single-product order's line; a cart
	// has Lines instead (ProductID "").
	ProductID string
	Quantity  int64
	// Lines are the order's products (order_lines); when empty, the order
	// is the one line ProductID and Quantity name.
	Lines []Line
	// Status is the order's state; CANCELLED orders gave their stock back.
	Status string
}

// Line is one product of an order and its units.
type Line struct {
	ProductID string
	Quantity  int64
}

// lines returns the order's lines.
func (o OrderRow) lines() []Line {
	if len(o.Lines) > 0 {
		return o.Lines
	}
	return []Line{{ProductID: o.ProductID, Quantity: o.Quantity}}
}

// Response is what one client got for one POST /orders.
type Response struct {
	UserID         string
	IdempotencyKey string
	Status         int
	Body           string
	// OrderID is the id the body names, empty when it names none.
	OrderID string
	// Lines are the products and units a 201 names, when the client read
	// them from the body; when set, the order row must hold the same.
	Lines []Line
}

// Final reports whether the response is a final answer that every retry of
// the same request must repeat: a success or a saved rejection. 202 (still
// in progress), 4xx validation errors other than 409, and 5xx are not.
func (r Response) Final() bool { return r.Status == 201 || r.Status == 409 }

// Stock is a product's stock before and after a run.
type Stock struct {
	Initial, Final int64
}

// Violation is one violation [Orders] found.
type Violation struct {
	// Check is the check that caught it, one of [Checks].
	Check string
	// Detail describes the violation, naming the rows or answers involved.
	Detail string
}

// String renders the violation as "check: detail".
func (v Violation) String() string { return v.Check + ": " + v.Detail }

// Report is the verdict of [Orders].
type Report struct {
	// Checked counts the rows and responses examined.
	Checked int
	// Rows and Answers count them apart: the order rows and the answers
	// to POST /orders (for [Effects], the effects).
	Rows, Answers int
	// Violations lists each violation found, in the order of [Checks].
	Violations []Violation

	// checks and answers name what the report judged, for String: the
	// checks run (nil: [Checks]) and what Answers counts (empty: answers).
	checks  []string
	answers string
}

// OK reports whether no violation was found.
func (r Report) OK() bool { return len(r.Violations) == 0 }

// Caught reports whether check found at least one violation.
func (r Report) Caught(check string) bool {
	return slices.ContainsFunc(r.Violations, func(v Violation) bool { return v.Check == check })
}

// String summarises the report: what was checked, over what, and then one
// violation a line.
func (r Report) String() string {
	checks, answers := r.checks, r.answers
	if checks == nil {
		checks, answers = Checks(), "answer"
	}
	what := fmt.Sprintf("%s over %s and %s", strings.Join(checks, ", "), plural(r.Rows, "order row"), plural(r.Answers, answers))
	if r.OK() {
		return what + ": no violations"
	}
	lines := make([]string, len(r.Violations))
	for i, v := range r.Violations {
		lines[i] = v.String()
	}
	return fmt.Sprintf("%s: %d violations:\n  %s", what, len(r.Violations), strings.Join(lines, "\n  "))
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func (r *Report) add(check, format string, args ...any) {
	r.Violations = append(r.Violations, Violation{Check: check, Detail: fmt.Sprintf(format, args...)})
}

// sortedKeys returns the keys of m, sorted by cmp.
func sortedKeys[K comparable, V any](m map[K]V, cmp func(a, b K) int) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, cmp)
	return ks
}

// Count returns how many responses had each status code, for reports.
func Count(responses []Response) map[int]int {
	c := map[int]int{}
	for _, r := range responses {
		c[r.Status]++
	}
	return c
}

// Summary renders [Count] as a stable string such as "201:1 202:2",
// status codes in increasing order.
func Summary(responses []Response) string {
	c := Count(responses)
	parts := make([]string, 0, len(c))
	for _, code := range sortedKeys(c, func(a, b int) int { return a - b }) {
		parts = append(parts, fmt.Sprintf("%d:%d", code, c[code]))
	}
	return strings.Join(parts, " ")
}
