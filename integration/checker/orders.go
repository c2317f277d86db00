package checker

import (
	"fmt"
	"sort"
)

// OrderRow is one row of the orders table at the end of a run.
type OrderRow struct {
	OrderID        string
	UserID         string
	IdempotencyKey string
	ProductID      string
	Quantity       int64
	// Status is the order's state; CANCELLED orders gave their stock back.
	Status string
}

// Response is what one client got for one POST /orders.
type Response struct {
	UserID         string
	IdempotencyKey string
	Status         int
	Body           string
	// OrderID is the id the body names, empty when it names none.
	OrderID string
}

// Final reports whether the response is a final answer that every retry of
// the same request must repeat: a success or a saved rejection. 202 (still
// in progress), 4xx validation errors other than 409, and 5xx are not.
func (r Response) Final() bool { return r.Status == 201 || r.Status == 409 }

// Stock is a product's stock before and after a run.
type Stock struct {
	Initial, Final int64
}

// Orders judges an order run: at most one order per (user, idempotency
// key); every final answer to one key identical; every order a 201 named
// exists; and per product, stock never negative and exactly what the live
// orders took (no oversell, no lost decrement).
func Orders(stock map[string]Stock, rows []OrderRow, responses []Response) Report {
	r := Report{Checked: len(rows) + len(responses)}
	type ukey struct{ user, key string }
	perKey := map[ukey][]string{}
	byID := map[string]OrderRow{}
	taken := map[string]int64{}
	for _, o := range rows {
		k := ukey{o.UserID, o.IdempotencyKey}
		perKey[k] = append(perKey[k], o.OrderID)
		byID[o.OrderID] = o
		if o.Status != "CANCELLED" {
			taken[o.ProductID] += o.Quantity
		}
	}
	for _, k := range sortedKeys(perKey, func(a, b ukey) bool { return a.user+"\x00"+a.key < b.user+"\x00"+b.key }) {
		if ids := perKey[k]; len(ids) > 1 {
			r.add("user %s key %s has %d orders: %v", k.user, k.key, len(ids), ids)
		}
	}
	products := map[string]bool{}
	for p := range stock {
		products[p] = true
	}
	for p := range taken {
		products[p] = true
	}
	for _, p := range sortedKeys(products, func(a, b string) bool { return a < b }) {
		s, ok := stock[p]
		if !ok {
			r.add("orders for product %s, which the run never stocked", p)
			continue
		}
		if s.Final < 0 {
			r.add("product %s stock is negative: %d", p, s.Final)
		}
		if got := s.Initial - s.Final; got != taken[p] {
			r.add("product %s: stock went from %d to %d (%d taken) but live orders hold %d", p, s.Initial, s.Final, got, taken[p])
		}
		if taken[p] > s.Initial {
			r.add("product %s oversold: %d sold of %d", p, taken[p], s.Initial)
		}
	}
	first := map[ukey]Response{}
	for _, resp := range responses {
		if !resp.Final() {
			continue
		}
		k := ukey{resp.UserID, resp.IdempotencyKey}
		if resp.Status == 201 {
			if o, ok := byID[resp.OrderID]; !ok {
				r.add("user %s key %s got order %q, which is not in the table", k.user, k.key, resp.OrderID)
			} else if o.UserID != resp.UserID || o.IdempotencyKey != resp.IdempotencyKey {
				r.add("user %s key %s got order %s, which belongs to user %s key %s", k.user, k.key, o.OrderID, o.UserID, o.IdempotencyKey)
			}
		}
		if f, ok := first[k]; !ok {
			first[k] = resp
		} else if f.Status != resp.Status || f.Body != resp.Body {
			r.add("user %s key %s answered differently: %d %s vs %d %s", k.user, k.key, f.Status, f.Body, resp.Status, resp.Body)
		}
	}
	return r
}

func sortedKeys[K comparable, V any](m map[K]V, less func(a, b K) bool) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return less(ks[i], ks[j]) })
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

// Summary renders Count as a stable string such as "201:1 200:2".
func Summary(responses []Response) string {
	c := Count(responses)
	codes := sortedKeys(c, func(a, b int) bool { return a < b })
	s := ""
	for i, code := range codes {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%d:%d", code, c[code])
	}
	return s
}
