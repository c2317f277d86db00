package audit_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/devtools/audit"
)

// cleanRun is the seed scenario done right: one unit, one order, every
// retry answered with the same 201, one still in progress.
func cleanRun() (map[string]audit.Stock, []audit.OrderRow, []audit.Response) {
	stock := map[string]audit.Stock{"42": {Initial: 1, Final: 0}}
	rows := []audit.OrderRow{{OrderID: "o1", UserID: "u1001", IdempotencyKey: "req-001", ProductID: "42", Quantity: 1, Status: "CREATED"}}
	body := `{"orderId":"o1","status":"CREATED"}`
	resps := []audit.Response{
		{UserID: "u1001", IdempotencyKey: "req-001", Status: 201, Body: body, OrderID: "o1"},
		{UserID: "u1001", IdempotencyKey: "req-001", Status: 201, Body: body, OrderID: "o1"},
		{UserID: "u1001", IdempotencyKey: "req-001", Status: 202, Body: ""},
	}
	return stock, rows, resps
}

func TestOrdersAcceptsCleanRun(t *testing.T) {
	stock, rows, resps := cleanRun()
	r := audit.Orders(stock, rows, resps)
	if !r.OK() || r.Checked != 4 || r.Rows != 1 || r.Answers != 3 {
		t.Fatalf("clean run judged %v", r)
	}
	// The summary names what was checked and over what.
	want := "one_order_per_key, non_negative_stock, no_oversell, stock_balance, same_answer, answer_matches_row over 1 order row and 3 answers: no violations"
	if got := r.String(); got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	if got := audit.Summary(resps); got != "201:2 202:1" {
		t.Fatalf("summary %q", got)
	}
	if got := audit.Summary(nil); got != "" {
		t.Fatalf("summary of nothing %q", got)
	}
}

// Negative controls: each check catches a real violation of its guarantee,
// and the violation is reported under that check.
func TestOrdersCatchesViolations(t *testing.T) {
	type mutation func(map[string]audit.Stock, *[]audit.OrderRow, *[]audit.Response)
	cases := []struct {
		name   string
		check  string
		mutate mutation
	}{
		{"double order", audit.CheckOneOrderPerKey, func(s map[string]audit.Stock, rows *[]audit.OrderRow, _ *[]audit.Response) {
			*rows = append(*rows, audit.OrderRow{OrderID: "o2", UserID: "u1001", IdempotencyKey: "req-001", ProductID: "42", Quantity: 1})
			s["42"] = audit.Stock{Initial: 2, Final: 0} // the stock balances: only the key check can see it
		}},
		{"negative stock", audit.CheckNonNegativeStock, func(s map[string]audit.Stock, rows *[]audit.OrderRow, _ *[]audit.Response) {
			*rows = append(*rows, audit.OrderRow{OrderID: "o2", UserID: "u2", IdempotencyKey: "k", ProductID: "42", Quantity: 1})
			s["42"] = audit.Stock{Initial: 1, Final: -1}
		}},
		{"oversold", audit.CheckNoOversell, func(s map[string]audit.Stock, rows *[]audit.OrderRow, _ *[]audit.Response) {
			*rows = append(*rows, audit.OrderRow{OrderID: "o2", UserID: "u2", IdempotencyKey: "k", ProductID: "42", Quantity: 1})
			s["42"] = audit.Stock{Initial: 1, Final: 0} // a lost decrement hid the second sale
		}},
		{"lost decrement", audit.CheckStockBalance, func(s map[string]audit.Stock, _ *[]audit.OrderRow, _ *[]audit.Response) {
			s["42"] = audit.Stock{Initial: 1, Final: 1}
		}},
		{"unstocked product", audit.CheckStockBalance, func(_ map[string]audit.Stock, rows *[]audit.OrderRow, _ *[]audit.Response) {
			*rows = append(*rows, audit.OrderRow{OrderID: "o3", UserID: "u3", IdempotencyKey: "k", ProductID: "43", Quantity: 1})
		}},
		{"a cart sold in part", audit.CheckStockBalance, func(s map[string]audit.Stock, rows *[]audit.OrderRow, _ *[]audit.Response) {
			*rows = append(*rows, audit.OrderRow{OrderID: "c1", UserID: "u4", IdempotencyKey: "k", Quantity: 2,
				Lines: []audit.Line{{ProductID: "7", Quantity: 1}, {ProductID: "8", Quantity: 1}}})
			s["7"] = audit.Stock{Initial: 1, Final: 0}
			s["8"] = audit.Stock{Initial: 1, Final: 1} // the cart's second line never took its unit
		}},
		{"a cart's line oversold", audit.CheckNoOversell, func(s map[string]audit.Stock, rows *[]audit.OrderRow, _ *[]audit.Response) {
			*rows = append(*rows, audit.OrderRow{OrderID: "c1", UserID: "u4", IdempotencyKey: "k", Quantity: 2,
				Lines: []audit.Line{{ProductID: "42", Quantity: 1}, {ProductID: "8", Quantity: 1}}})
			s["8"] = audit.Stock{Initial: 1, Final: 0}
		}},
		{"different answers", audit.CheckSameAnswer, func(_ map[string]audit.Stock, _ *[]audit.OrderRow, resps *[]audit.Response) {
			(*resps)[1].Body = `{"orderId":"o1","status":"PAID"}`
		}},
		{"201 then a saved 409", audit.CheckSameAnswer, func(_ map[string]audit.Stock, _ *[]audit.OrderRow, resps *[]audit.Response) {
			(*resps)[1] = audit.Response{UserID: "u1001", IdempotencyKey: "req-001", Status: 409, Body: `{"title":"conflict"}`}
		}},
		{"phantom order", audit.CheckAnswerMatchesRow, func(_ map[string]audit.Stock, _ *[]audit.OrderRow, resps *[]audit.Response) {
			*resps = append(*resps, audit.Response{UserID: "u9", IdempotencyKey: "k", Status: 201, Body: "x", OrderID: "nope"})
		}},
		{"other lines than the row's", audit.CheckAnswerMatchesRow, func(_ map[string]audit.Stock, _ *[]audit.OrderRow, resps *[]audit.Response) {
			(*resps)[0].Lines = []audit.Line{{ProductID: "42", Quantity: 2}}
		}},
		{"someone else's order", audit.CheckAnswerMatchesRow, func(_ map[string]audit.Stock, _ *[]audit.OrderRow, resps *[]audit.Response) {
			*resps = append(*resps, audit.Response{UserID: "u9", IdempotencyKey: "k", Status: 201, Body: "x", OrderID: "o1"})
		}},
	}
	covered := map[string]bool{}
	for _, tc := range cases {
		covered[tc.check] = true
		t.Run(tc.name, func(t *testing.T) {
			stock, rows, resps := cleanRun()
			tc.mutate(stock, &rows, &resps)
			r := audit.Orders(stock, rows, resps)
			if r.OK() || !r.Caught(tc.check) {
				t.Fatalf("%s not caught by %s: %v", tc.name, tc.check, r)
			}
			if !strings.Contains(r.String(), tc.check+": ") {
				t.Fatalf("the report does not name %s: %v", tc.check, r)
			}
		})
	}
	for _, c := range audit.Checks() {
		if !covered[c] {
			t.Errorf("check %s has no negative control", c)
		}
	}
}

// A cart's lines are counted per product: two carts and a single order
// that together take the stock balance.
func TestOrdersCountsCartLines(t *testing.T) {
	stock := map[string]audit.Stock{"1": {Initial: 3, Final: 0}, "2": {Initial: 2, Final: 1}}
	rows := []audit.OrderRow{
		{OrderID: "a", UserID: "u1", IdempotencyKey: "k", Quantity: 2, Lines: []audit.Line{{ProductID: "1", Quantity: 1}, {ProductID: "2", Quantity: 1}}, Status: "PAID"},
		{OrderID: "b", UserID: "u2", IdempotencyKey: "k", Quantity: 2, Lines: []audit.Line{{ProductID: "1", Quantity: 1}, {ProductID: "2", Quantity: 1}}, Status: "CANCELLED"},
		{OrderID: "c", UserID: "u3", IdempotencyKey: "k", ProductID: "1", Quantity: 2, Status: "CREATED"},
	}
	if r := audit.Orders(stock, rows, nil); !r.OK() {
		t.Fatalf("a balanced run with carts judged %v", r)
	}
}

// Only final answers must agree: a 202 in progress, a 400 or a 503 before
// the 201 are not violations.
func TestOrdersIgnoresAnswersThatAreNotFinal(t *testing.T) {
	stock, rows, resps := cleanRun()
	for _, code := range []int{202, 400, 503} {
		resps = append(resps, audit.Response{UserID: "u1001", IdempotencyKey: "req-001", Status: code, Body: "not yet"})
	}
	if r := audit.Orders(stock, rows, resps); !r.OK() {
		t.Fatalf("answers that are not final judged %v", r)
	}
}

func TestCancelledOrdersGiveStockBack(t *testing.T) {
	stock := map[string]audit.Stock{"42": {Initial: 3, Final: 2}}
	rows := []audit.OrderRow{
		{OrderID: "o1", UserID: "a", IdempotencyKey: "1", ProductID: "42", Quantity: 1, Status: "PAID"},
		{OrderID: "o2", UserID: "b", IdempotencyKey: "1", ProductID: "42", Quantity: 2, Status: "CANCELLED"},
	}
	if r := audit.Orders(stock, rows, nil); !r.OK() {
		t.Fatalf("cancelled order counted as taking stock: %v", r)
	}
	// The same history with the cancelled order still counted is a lost
	// restock: the balance check must see it.
	rows[1].Status = "CREATED"
	if r := audit.Orders(stock, rows, nil); !r.Caught(audit.CheckStockBalance) {
		t.Fatalf("a live order of 2 with 1 unit taken judged %v", r)
	}
}

// The report lists its violations in the order of Checks, each check's
// rows in a stable order, whatever the order of the input.
func TestOrdersReportIsStable(t *testing.T) {
	stock := map[string]audit.Stock{"a": {Initial: 1, Final: -1}, "b": {Initial: 1, Final: 1}}
	rows := []audit.OrderRow{
		{OrderID: "o2", UserID: "u", IdempotencyKey: "k", ProductID: "a", Quantity: 1},
		{OrderID: "o1", UserID: "u", IdempotencyKey: "k", ProductID: "a", Quantity: 1},
		{OrderID: "o3", UserID: "v", IdempotencyKey: "k", ProductID: "c", Quantity: 1},
	}
	want := audit.Orders(stock, rows, nil).String()
	var order []string
	for _, v := range audit.Orders(stock, rows, nil).Violations {
		if len(order) == 0 || order[len(order)-1] != v.Check {
			order = append(order, v.Check)
		}
	}
	if !slices.IsSortedFunc(order, func(a, b string) int { return slices.Index(audit.Checks(), a) - slices.Index(audit.Checks(), b) }) {
		t.Fatalf("violations out of the order of Checks: %v", order)
	}
	slices.Reverse(rows)
	if got := audit.Orders(stock, rows, nil).String(); got != want {
		t.Fatalf("the report depends on the order of the rows:\n%s\nvs\n%s", got, want)
	}
}
