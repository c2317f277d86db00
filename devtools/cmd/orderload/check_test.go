package main

import (
	"strings"
	"testing"
)

func checkSides() ([]side, [][]*tally) {
	d := side{name: sideDistinct, users: []user{{id: "u1", product: "p1"}, {id: "u2", product: "p2"}}, products: []string{"p1", "p2"}}
	p := side{name: sidePopular, users: []user{{id: "h1", product: "hot"}}, products: []string{"hot"}}
	tallies := [][]*tally{
		{{created: []int{0, 2}, uncertain: []int{1}}, {created: []int{0}}},
		{{created: []int{0, 1}, uncertain: []int{2, 3}}},
	}
	return []side{d, p}, tallies
}

// TestReconcile: a healthy database passes; each way of going wrong is
// counted.
func TestReconcile(t *testing.T) {
	sides, tallies := checkSides()
	good := []dbOrder{
		{"u1", "k0", "p1", 1}, {"u1", "k2", "p1", 1}, {"u1", "k1", "p1", 1}, // k1 timed out but took effect
		{"u2", "k0", "p2", 1},
		{"h1", "k0", "hot", 1}, {"h1", "k1", "hot", 1}, {"h1", "k3", "hot", 1},
	}
	c := reconcile(sides, tallies, good)
	c.balance([]stockRow{{"p1", 7, 10, 3}, {"p2", 9, 10, 1}, {"hot", 7, 10, 3}}, []string{"p1", "p2", "hot"}, 10, unitsByProduct(good))
	if ok, problem := c.verdict(); !ok || c.Orders != 7 || c.Created != 5 || c.Uncertain != 3 || c.UncertainCreated != 2 || c.Products != 3 {
		t.Fatalf("healthy: %+v %s", c, problem)
	}
	for name, tc := range map[string]struct {
		orders []dbOrder
		stock  []stockRow
		want   string
	}{
		"missing":    {good[1:], nil, "1 201 answers without an order"},
		"unexpected": {append(good[:7:7], dbOrder{"u2", "k1", "p2", 1}), nil, "1 orders no 201"},
		"stranger":   {append(good[:7:7], dbOrder{"x", "k0", "p2", 1}), nil, "1 orders no 201"},
		"bad key":    {append(good[:7:7], dbOrder{"u2", "other", "p2", 1}), nil, "1 orders no 201"},
		"wrong":      {append([]dbOrder{{"u1", "k0", "p2", 1}}, good[1:]...), nil, "1 orders of another product"},
		"two units":  {append([]dbOrder{{"u1", "k0", "p1", 2}}, good[1:]...), nil, "1 orders of another product"},
		"negative":   {good, []stockRow{{"p1", -1, 10, 11}}, "1 products with a negative stock"},
		"lost stock": {good, []stockRow{{"p1", 6, 10, 3}}, "available + sold is not the stock seeded"},
		"restocked":  {good, []stockRow{{"p1", 8, 11, 3}}, "available + sold is not the stock seeded"},
		"absent":     {good, []stockRow{}, "available + sold"},
	} {
		c := reconcile(sides, tallies, tc.orders)
		stock := []stockRow{{"p1", 7, 10, 3}, {"p2", 9, 10, 1}, {"hot", 7, 10, 3}}
		if tc.stock != nil {
			stock = append(tc.stock, stock[1:]...)
		}
		c.balance(stock, []string{"p1", "p2", "hot"}, 10, unitsByProduct(good))
		if ok, problem := c.verdict(); ok || !strings.Contains(problem, tc.want) {
			t.Errorf("%s: ok %v, problem %q; want %q", name, ok, problem, tc.want)
		}
	}
	c = reconcile(sides, tallies, good)
	c.Invariants = []string{"non_negative_stock: p9"}
	if ok, problem := c.verdict(); ok || !strings.Contains(problem, "non_negative_stock: p9") {
		t.Errorf("invariants: %v %q", ok, problem)
	}
}

func TestSeqOf(t *testing.T) {
	for key, want := range map[string]int{"k0": 0, "k17": 17} {
		if n, ok := seqOf(key); !ok || n != want {
			t.Errorf("seqOf(%q) = %d, %v", key, n, ok)
		}
	}
	for _, key := range []string{"", "k", "k-1", "k01", "x1", "k1a"} {
		if _, ok := seqOf(key); ok {
			t.Errorf("seqOf(%q) accepted", key)
		}
	}
}
