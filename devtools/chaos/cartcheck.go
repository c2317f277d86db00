package chaos

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/quorumlock/quorumlock/devtools/checker"
)

// cartRow is one committed cart, from the ledger.
type cartRow struct {
	id       string
	products []string
	units    []int64
}

// cartLine is one row a committed cart wrote, from cartLinesTable.
type cartLine struct {
	cart, product               string
	fence, units, before, after int64
}

// cartReport is what checkCarts found.
type cartReport struct {
	violations []string
	// lost sums, over the products, how far each final stock is from its
	// initial stock less the units of the committed carts that name it.
	lost int64
	// torn counts the carts not applied whole.
	torn int
}

// checkCarts judges the carts the ledger says committed against the stock
// rows and the lines:
//   - per product, the final stock is the initial stock less the units of
//     the committed carts that name it;
//   - every committed cart has exactly one line per product it names, and
//     each line took exactly the cart's units off the row as it stood (a
//     late write computed from a stale read does not);
//   - no line belongs to a cart that did not commit.
func checkCarts(initial, final map[string]int64, carts []cartRow, lines []cartLine) cartReport {
	var rep cartReport
	byCart := map[string][]cartLine{}
	for _, l := range lines {
		byCart[l.cart] = append(byCart[l.cart], l)
	}
	sold := map[string]int64{}
	for _, c := range carts {
		for i, p := range c.products {
			if i < len(c.units) {
				sold[p] += c.units[i]
			}
		}
		if msg := tornCart(c, byCart[c.id]); msg != "" {
			rep.torn++
			rep.violations = append(rep.violations, msg)
		}
		delete(byCart, c.id)
	}
	for _, id := range slices.Sorted(maps.Keys(byCart)) {
		rep.torn++
		rep.violations = append(rep.violations, fmt.Sprintf("cart %s wrote %d lines but is not in the ledger", id, len(byCart[id])))
	}
	products := maps.Clone(initial)
	maps.Copy(products, final)
	for _, p := range slices.Sorted(maps.Keys(products)) {
		start, known := initial[p]
		got, ok := final[p]
		if !known || !ok {
			rep.violations = append(rep.violations, fmt.Sprintf("product %s: no starting stock or no final row", p))
			continue
		}
		want := start - sold[p]
		if d := got - want; d != 0 {
			rep.lost += max(d, -d)
			rep.violations = append(rep.violations, fmt.Sprintf("product %s: final stock %d, but %d less the %d units of its committed carts is %d (%+d)",
				p, got, start, sold[p], want, d))
		}
	}
	return rep
}

// tornCart says how cart c's lines fall short of it, or "" when it took
// exactly its units off every product it names.
func tornCart(c cartRow, lines []cartLine) string {
	if len(c.products) != len(c.units) || len(c.products) == 0 {
		return fmt.Sprintf("cart %s: malformed ledger entry %v %v", c.id, c.products, c.units)
	}
	want := map[string]int64{}
	for i, p := range c.products {
		want[p] = c.units[i]
	}
	var bad []string
	seen := map[string]bool{}
	for _, l := range lines {
		u, named := want[l.product]
		switch {
		case !named:
			bad = append(bad, fmt.Sprintf("a line for %s, which it does not name", l.product))
		case seen[l.product]:
			bad = append(bad, fmt.Sprintf("a second line for %s", l.product))
		case l.units != u || l.before-l.after != u:
			bad = append(bad, fmt.Sprintf("%s went from %d to %d (fence %d), not down by its %d units", l.product, l.before, l.after, l.fence, u))
		}
		seen[l.product] = true
	}
	for _, p := range c.products {
		if !seen[p] {
			bad = append(bad, fmt.Sprintf("no line for %s", p))
		}
	}
	if len(bad) == 0 {
		return ""
	}
	return fmt.Sprintf("cart %s not applied whole: %s", c.id, strings.Join(bad, "; "))
}

// readCarts reads the cart workload's rows, ledger and lines, and checks
// them (checkCarts). Each product's lines, in seq order, are its accepted
// writes in commit order: a line is written under the row's lock, which
// its transaction holds until it commits.
func (e *Env) readCarts(ctx context.Context) (store, error) {
	rows, err := e.pool.Query(ctx, "SELECT product_id, available FROM "+cartStockTable)
	if err != nil {
		return store{}, err
	}
	final := map[string]int64{}
	var p string
	var v int64
	if _, err := pgx.ForEachRow(rows, []any{&p, &v}, func() error { final[p] = v; return nil }); err != nil {
		return store{}, err
	}
	rows, err = e.pool.Query(ctx, "SELECT cart, products, units FROM "+cartsTable+" ORDER BY cart")
	if err != nil {
		return store{}, err
	}
	carts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (cartRow, error) {
		var c cartRow
		return c, row.Scan(&c.id, &c.products, &c.units)
	})
	if err != nil {
		return store{}, err
	}
	rows, err = e.pool.Query(ctx, "SELECT cart, product_id, fence, units, before, after FROM "+cartLinesTable+" ORDER BY seq")
	if err != nil {
		return store{}, err
	}
	lines, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (cartLine, error) {
		var l cartLine
		return l, row.Scan(&l.cart, &l.product, &l.fence, &l.units, &l.before, &l.after)
	})
	if err != nil {
		return store{}, err
	}
	initial := cartStock()
	rep := checkCarts(initial, final, carts, lines)
	st := store{initial: map[string]int64{}, committed: len(carts), violations: rep.violations, lost: rep.lost, torn: rep.torn}
	for p, n := range initial {
		st.initial[CartKey(p)] = n
	}
	for _, l := range lines {
		st.accepted = append(st.accepted, checker.Write{Resource: CartKey(l.product), Fence: l.fence, Writer: "cart " + l.cart})
	}
	return st, nil
}
