package audit

import (
	"fmt"
	"slices"
	"strings"
)

// Orders judges an order run (see the package documentation for the
// checks): stock holds every product the run stocked, rows the orders
// table at the end, responses every answer the clients got, in any order.
func Orders(stock map[string]Stock, rows []OrderRow, responses []Response) Report {
	r := Report{Checked: len(rows) + len(responses), Rows: len(rows), Answers: len(responses)}
	t := indexRows(rows)
	r.checkKeys(t.perKey)
	r.checkStock(stock, t.taken)
	r.checkAnswers(t.byID, responses)
	return r
}

// ukey is a (user, idempotency key) pair.
type ukey struct{ user, key string }

func (a ukey) cmp(b ukey) int {
	return strings.Compare(a.user+"\x00"+a.key, b.user+"\x00"+b.key)
}

// table is the orders table indexed for the checks.
type table struct {
	perKey map[ukey][]string   // order ids per (user, key)
	byID   map[string]OrderRow // rows by order id
	taken  map[string]int64    // units the live orders hold, per product
}

func indexRows(rows []OrderRow) table {
	t := table{perKey: map[ukey][]string{}, byID: map[string]OrderRow{}, taken: map[string]int64{}}
	for _, o := range rows {
		k := ukey{o.UserID, o.IdempotencyKey}
		t.perKey[k] = append(t.perKey[k], o.OrderID)
		t.byID[o.OrderID] = o
		if o.Status != "CANCELLED" {
			for _, l := range o.lines() {
				t.taken[l.ProductID] += l.Quantity
			}
		}
	}
	return t
}

// checkKeys runs CheckOneOrderPerKey.
func (r *Report) checkKeys(perKey map[ukey][]string) {
	for _, k := range sortedKeys(perKey, ukey.cmp) {
		if ids := perKey[k]; len(ids) > 1 {
			slices.Sort(ids)
			r.add(CheckOneOrderPerKey, "user %s key %s has %d orders: %v", k.user, k.key, len(ids), ids)
		}
	}
}

// checkStock runs CheckNonNegativeStock, CheckNoOversell and
// CheckStockBalance over every product stocked or ordered, in that order.
func (r *Report) checkStock(stock map[string]Stock, taken map[string]int64) {
	products := map[string]bool{}
	for p := range stock {
		products[p] = true
	}
	for p := range taken {
		products[p] = true
	}
	var negative, oversold, balance []string
	for _, p := range sortedKeys(products, strings.Compare) {
		s, ok := stock[p]
		switch {
		case !ok:
			balance = append(balance, fmt.Sprintf("orders for product %s, which the run never stocked", p))
			continue
		case s.Final < 0:
			negative = append(negative, fmt.Sprintf("product %s stock is negative: %d", p, s.Final))
		}
		if taken[p] > s.Initial {
			oversold = append(oversold, fmt.Sprintf("product %s oversold: %d sold of %d", p, taken[p], s.Initial))
		}
		if got := s.Initial - s.Final; got != taken[p] {
			balance = append(balance, fmt.Sprintf("product %s: stock went from %d to %d (%d taken) but live orders hold %d", p, s.Initial, s.Final, got, taken[p]))
		}
	}
	r.addAll(CheckNonNegativeStock, negative)
	r.addAll(CheckNoOversell, oversold)
	r.addAll(CheckStockBalance, balance)
}

// checkAnswers runs CheckSameAnswer and then CheckAnswerMatchesRow over
// the final answers.
func (r *Report) checkAnswers(byID map[string]OrderRow, responses []Response) {
	first := map[ukey]Response{}
	var mismatched []string
	for _, resp := range responses {
		if !resp.Final() {
			continue
		}
		k := ukey{resp.UserID, resp.IdempotencyKey}
		if resp.Status == 201 {
			if o, ok := byID[resp.OrderID]; !ok {
				mismatched = append(mismatched, fmt.Sprintf("user %s key %s got order %q, which is not in the table", k.user, k.key, resp.OrderID))
			} else if o.UserID != resp.UserID || o.IdempotencyKey != resp.IdempotencyKey {
				mismatched = append(mismatched, fmt.Sprintf("user %s key %s got order %s, which belongs to user %s key %s", k.user, k.key, o.OrderID, o.UserID, o.IdempotencyKey))
			} else if len(resp.Lines) > 0 && !sameLines(resp.Lines, o.lines()) {
				mismatched = append(mismatched, fmt.Sprintf("user %s key %s got order %s with lines %v, the row holds %v", k.user, k.key, o.OrderID, resp.Lines, o.lines()))
			}
		}
		if f, ok := first[k]; !ok {
			first[k] = resp
		} else if f.Status != resp.Status || f.Body != resp.Body {
			r.add(CheckSameAnswer, "user %s key %s answered differently: %d %s vs %d %s", k.user, k.key, f.Status, f.Body, resp.Status, resp.Body)
		}
	}
	r.addAll(CheckAnswerMatchesRow, mismatched)
}

// addAll adds one violation of check per detail.
func (r *Report) addAll(check string, details []string) {
	for _, d := range details {
		r.add(check, "%s", d)
	}
}

// sameLines reports whether a and b hold the same products and units, in
// any order.
func sameLines(a, b []Line) bool {
	key := func(ls []Line) []Line {
		out := slices.Clone(ls)
		slices.SortFunc(out, func(x, y Line) int { return strings.Compare(x.ProductID, y.ProductID) })
		return out
	}
	return slices.Equal(key(a), key(b))
}
