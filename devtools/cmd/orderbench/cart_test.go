package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// tenProducts is a cart run's products, as cartUsers names them.
func tenProducts() []string {
	ps := make([]string, cartProducts)
	for i := range ps {
		ps[i] = fmt.Sprintf("cart.4.lock.%d", i+1)
	}
	return ps
}

// TestCartDeck: every cart holds 3 distinct products of the 10, one unit
// each, in a random order, and is named by its products sorted; the draws
// follow the seed and the user.
func TestCartDeck(t *testing.T) {
	products := tenProducts()
	draw := func(seed uint64, u int) (bodies, names []string) {
		d, err := newCartDeck(products, seed, u)
		if err != nil {
			t.Fatal(err)
		}
		for range 300 {
			b, n := d.next()
			bodies, names = append(bodies, string(b)), append(names, n)
		}
		return bodies, names
	}
	bodies, names := draw(1, 0)
	again, _ := draw(1, 0)
	other, _ := draw(2, 0)
	otherUser, _ := draw(1, 1)
	if !slices.Equal(bodies, again) || slices.Equal(bodies, other) || slices.Equal(bodies, otherUser) {
		t.Fatal("the carts do not follow the seed and the user")
	}
	seen, unsorted := map[string]int{}, 0
	for i, body := range bodies {
		var c struct {
			Items []struct {
				ProductID string `json:"productId"`
				Quantity  int    `json:"quantity"`
			}
			AddressVersion string `json:"addressVersion"`
		}
		if err := json.Unmarshal([]byte(body), &c); err != nil || c.AddressVersion != "v1" || len(c.Items) != cartLines {
			t.Fatalf("cart %s: %+v %v", body, c, err)
		}
		var ids []string
		for _, it := range c.Items {
			if it.Quantity != 1 || !slices.Contains(products, it.ProductID) {
				t.Fatalf("cart %s: line %+v", body, it)
			}
			ids = append(ids, it.ProductID)
			seen[it.ProductID]++
		}
		if !slices.IsSorted(ids) {
			unsorted++
		}
		slices.Sort(ids)
		if len(slices.Compact(slices.Clone(ids))) != cartLines || strings.Join(ids, ",") != names[i] {
			t.Fatalf("cart %s named %q", body, names[i])
		}
	}
	// 900 lines over 10 products: about 90 each.
	for _, p := range products {
		if seen[p] < 50 || seen[p] > 130 {
			t.Errorf("product %s on %d of 900 lines", p, seen[p])
		}
	}
	if unsorted == 0 {
		t.Error("every cart named its lines sorted: the order is not random")
	}
}

// TestReconcileCarts: a cart order must hold the lines of the cart its
// request named, one unit each; the check counts the units it should hold.
func TestReconcileCarts(t *testing.T) {
	d, err := newCartDeck(tenProducts(), 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	users := []user{{id: "u1", cart: d}}
	tallies := func() []*tally {
		return []*tally{{createdSeqs: []int{0, 2}, uncertainSeqs: []int{1}, carts: []string{"a,b,c", "a,d,e", "b,c,d"}}}
	}
	row := func(key, lines string, units int64) orderRow {
		return orderRow{user: "u1", key: key, product: lines, quantity: units}
	}
	run := func(rows []orderRow, taken int64) checkResult {
		r := newReconciler(users)
		for _, o := range rows {
			r.add(o)
		}
		return r.finish(tallies(), taken)
	}
	c := run([]orderRow{row("k0", "a,b,c", 3), row("k2", "b,c,d", 3)}, 6)
	if !c.OK || c.Created != 2 || c.Orders != 2 || c.Units != 6 || c.WantUnits != 6 || c.Uncertain != 1 || c.UncertainCreated != 0 {
		t.Fatalf("consistent carts: %+v", c)
	}
	c = run([]orderRow{row("k0", "a,b,c", 3), row("k1", "a,d,e", 3), row("k2", "b,c,d", 3)}, 9)
	if !c.OK || c.UncertainCreated != 1 || c.WantUnits != 9 {
		t.Fatalf("an uncertain cart that took effect: %+v", c)
	}
	for name, tc := range map[string]struct {
		rows  []orderRow
		taken int64
	}{
		"wrong lines":   {[]orderRow{row("k0", "a,b,d", 3), row("k2", "b,c,d", 3)}, 6},
		"a line short":  {[]orderRow{row("k0", "a,b", 2), row("k2", "b,c,d", 3)}, 5},
		"two units":     {[]orderRow{row("k0", "a,b,c", 4), row("k2", "b,c,d", 3)}, 7},
		"stock short":   {[]orderRow{row("k0", "a,b,c", 3), row("k2", "b,c,d", 3)}, 5},
		"lost cart":     {[]orderRow{row("k0", "a,b,c", 3)}, 3},
		"unknown cart":  {[]orderRow{row("k0", "a,b,c", 3), row("k2", "b,c,d", 3), row("k9", "a,b,c", 3)}, 9},
		"no lines kept": {[]orderRow{row("k0", "", 0), row("k2", "b,c,d", 3)}, 3},
	} {
		if c := run(tc.rows, tc.taken); c.OK {
			t.Errorf("%s: accepted: %+v", name, c)
		}
	}
}

// TestWithLines: per product, the stock left plus the units of its order
// lines must equal the stock seeded, every product must be there, and an
// earlier problem stays.
func TestWithLines(t *testing.T) {
	ok := []productLines{{Product: "a", Seeded: 10, Left: 7, Sold: 3}, {Product: "b", Seeded: 10, Left: 10}}
	if c := (checkResult{OK: true}).withLines(ok, 2); !c.OK || c.Problem != "" || len(c.Products) != 2 {
		t.Fatalf("consistent products refused: %+v", c)
	}
	for name, tc := range map[string]struct {
		ps      []productLines
		prior   string
		mention string
	}{
		"oversold": {[]productLines{{Product: "a", Seeded: 10, Left: 8, Sold: 3}, ok[1]}, "", "product a: 1 units oversold"},
		"lost":     {[]productLines{{Product: "a", Seeded: 10, Left: 6, Sold: 3}, ok[1]}, "", "product a: 1 units lost"},
		"negative": {[]productLines{ok[0], {Product: "b", Seeded: 10, Left: -1, Sold: 11}}, "", "product b: the stock went negative"},
		"missing":  {ok[:1], "", "1 of the 2 products"},
		"prior":    {ok, "boom", "boom"},
	} {
		c := checkResult{OK: tc.prior == "", Problem: tc.prior}.withLines(tc.ps, 2)
		if c.OK || !strings.Contains(c.Problem, tc.mention) {
			t.Errorf("%s: %+v, want a problem naming %q", name, c, tc.mention)
		}
	}
}

// TestRunCartEndToEnd runs cart, tiny, in both modes (lock on both
// backends, the defaults) on a bed of its own:
// every run places carts and passes the check, per product included, and
// the table, the comparison, the JSON and the plot hold it.
func TestRunCartEndToEnd(t *testing.T) {
	useLocalBed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	jsonPath, plotPath := filepath.Join(dir, "out.json"), filepath.Join(dir, "out.png")
	var out strings.Builder
	err := run(ctx, []string{"-scenarios", "cart", "-clients", "4", "-duration", "500ms", "-warmup", "100ms", "-seed", "3",
		"-json", jsonPath, "-plot", plotPath, "-quiet"}, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| cart/4 | lock/redlock | ", "| cart/4 | lock/etcd | ", "| cart/4 | db | ", "- cart/4: ", "(lock/etcd ", "cart: every request a cart of 3 distinct products of 10 (one unit each), picked at random (seed 3)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	s := readSummary(t, jsonPath)
	if len(s.Runs) != 3 || len(s.Comparisons) != 2 || s.Comparisons[0].Name != "cart/4" || s.Comparisons[1].Backend != backendEtcd || s.Config.Cart == nil ||
		*s.Config.Cart != (cartConfigJSON{Products: 10, Lines: 3, Seed: 3}) || s.Config.Flash != nil {
		t.Fatalf("json: %d runs, comparisons %+v, config %+v", len(s.Runs), s.Comparisons, s.Config)
	}
	for _, r := range s.Runs {
		c := r.Check
		if r.Scenario != scenarioCart || r.Clients != 4 || r.Sent == 0 || c.Created == 0 || r.Latency201.Count != r.Created {
			t.Errorf("%s/%s: figures: %+v", r.Name, r.Mode, r)
		}
		if !c.OK || c.Units != 3*int64(c.Orders) || c.WantUnits != c.Units || c.StockTaken != c.Units || len(c.Products) != cartProducts {
			t.Errorf("%s/%s: check: %+v", r.Name, r.Mode, c)
		}
		var sold int64
		tag := strings.ReplaceAll(modeLabel(r.Mode, r.Backend), "/", "-")
		for _, p := range c.Products {
			sold += p.Sold
			if p.Seeded != seedStock || p.Left+p.Sold != p.Seeded || !strings.HasPrefix(p.Product, "cart.4."+tag+".") {
				t.Errorf("%s/%s: product %+v", r.Name, r.Mode, p)
			}
		}
		if sold != c.Units {
			t.Errorf("%s/%s: the products' lines hold %d units, the orders %d", r.Name, r.Mode, sold, c.Units)
		}
	}
	checkPNG(t, plotPath)
}
