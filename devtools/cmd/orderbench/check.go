package main

import (
	"context"
	"fmt"
	"strings"
)

// checkResult is the database check of one run, made once every loop has
// stopped and every instance is closed. The database must hold an order
// for every 201 answer, and for nothing else but requests whose outcome
// the client could not learn; and the stock must have gone down by
// exactly the units those orders hold.
type checkResult struct {
	OK bool `json:"ok"`
	// Created counts the run's 201 answers, warm-up included.
	Created int `json:"created_answers"`
	// Uncertain counts requests with no answer or a 503 outcome_unknown;
	// UncertainCreated how many of them the database holds an order for.
	Uncertain        int `json:"uncertain"`
	UncertainCreated int `json:"uncertain_created"`
	// Orders and Units are the orders the database holds for the run's
	// users and the units they hold; StockTaken is how much the stock of
	// the run's products went down.
	Orders     int   `json:"orders_in_db"`
	Units      int64 `json:"units_in_db"`
	StockTaken int64 `json:"stock_taken"`
	// WantUnits is the units the orders accounted for should hold: one
	// per line of what their requests named.
	WantUnits int64 `json:"units_wanted"`
	// Missing counts 201 answers without an order, Unexpected orders that
	// no 201 (nor uncertain request) accounts for, WrongProduct orders
	// whose products are not those their request named.
	Missing      int `json:"missing"`
	Unexpected   int `json:"unexpected"`
	WrongProduct int `json:"wrong_product"`
	// Products is, for cart, every product's stock left and units in
	// order lines (see productLines).
	Products []productLines `json:"products,omitempty"`
	// Problem says what is wrong when OK is false.
	Problem string `json:"problem,omitempty"`
}

// orderRow is one order of the database, as the check reads it: product
// names its lines' products, sorted (byte-wise) and joined by ","; quantity
// is the units of its lines.
type orderRow struct {
	user, key, product string
	quantity           int64
}

// ordersSQL reads the orders of a set of users with their lines.
const ordersSQL = `SELECT o.user_id, o.idempotency_key,
  coalesce(string_agg(l.product_id, ',' ORDER BY l.product_id COLLATE "C"), ''), coalesce(sum(l.quantity), 0)::bigint
FROM orders o LEFT JOIN order_lines l ON l.order_id = o.order_id
WHERE o.user_id = ANY($1) GROUP BY o.order_id, o.user_id, o.idempotency_key`

// check reads the run's orders and its products' stock, and compares them
// with what the users were told. stockBefore is the run's products' total
// stock when it started.
func (b *bench) check(ctx context.Context, users []user, tallies []*tally, stockBefore int64) (checkResult, error) {
	ids := make([]string, len(users))
	products := map[string]bool{}
	for i, u := range users {
		ids[i] = u.id
		for _, p := range u.products() {
			products[p] = true
		}
	}
	rec := newReconciler(users)
	rows, err := b.db.admin.Query(ctx, ordersSQL, ids)
	if err != nil {
		return checkResult{}, fmt.Errorf("read orders: %w", err)
	}
	for rows.Next() {
		var o orderRow
		if err := rows.Scan(&o.user, &o.key, &o.product, &o.quantity); err != nil {
			rows.Close()
			return checkResult{}, fmt.Errorf("read orders: %w", err)
		}
		rec.add(o)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return checkResult{}, fmt.Errorf("read orders: %w", err)
	}
	names := make([]string, 0, len(products))
	for p := range products {
		names = append(names, p)
	}
	var after int64
	if err := b.db.admin.QueryRow(ctx, `SELECT coalesce(sum(available), 0)::bigint FROM product_stock WHERE product_id = ANY($1)`, names).Scan(&after); err != nil {
		return checkResult{}, fmt.Errorf("read stock: %w", err)
	}
	return rec.finish(tallies, stockBefore-after), nil
}

// reconciler matches the orders of a run's users, fed one by one, with the
// answers the users got.
type reconciler struct {
	users []user
	index map[string]int
	// found[i] maps the request number of each of users[i]'s orders to
	// the order's products.
	found []map[int]string
	c     checkResult
}

// newReconciler returns a reconciler for users.
func newReconciler(users []user) *reconciler {
	r := &reconciler{users: users, index: make(map[string]int, len(users)), found: make([]map[int]string, len(users))}
	for i, u := range users {
		r.index[u.id] = i
		r.found[i] = map[int]string{}
	}
	return r
}

// add counts one order.
func (r *reconciler) add(o orderRow) {
	r.c.Orders++
	r.c.Units += o.quantity
	i, ok := r.index[o.user]
	if !ok {
		r.c.Unexpected++
		return
	}
	n, ok := seqOf(o.key)
	if _, twice := r.found[i][n]; !ok || twice {
		r.c.Unexpected++ // not a key the user sent, or twice (the unique constraint forbids it)
		return
	}
	r.found[i][n] = o.product
}

// finish matches the orders added with tallies (tallies[i] is users[i]'s)
// and gives the verdict. stockTaken is how much the stock of the users'
// products went down.
func (r *reconciler) finish(tallies []*tally, stockTaken int64) checkResult {
	c := r.c
	c.StockTaken = stockTaken
	for i, t := range tallies {
		c.Created += len(t.createdSeqs)
		c.Uncertain += len(t.uncertainSeqs)
		for _, n := range t.createdSeqs {
			if !r.match(&c, i, t, n) {
				c.Missing++
			}
		}
		for _, n := range t.uncertainSeqs {
			if r.match(&c, i, t, n) {
				c.UncertainCreated++
			}
		}
		c.Unexpected += len(r.found[i])
	}
	c.OK, c.Problem = c.verdict()
	return c
}

// match reports whether users[i] has an order for its request n, whose
// tally is t; it takes the order off the found ones and counts in c the
// units it should hold and whether it holds the products the request named.
func (r *reconciler) match(c *checkResult, i int, t *tally, n int) bool {
	got, ok := r.found[i][n]
	if !ok {
		return false
	}
	delete(r.found[i], n)
	want := r.users[i].product
	if r.users[i].cart != nil {
		want = ""
		if n < len(t.carts) {
			want = t.carts[n]
		}
	}
	if got != want {
		c.WrongProduct++
	}
	c.WantUnits += int64(strings.Count(want, ",") + 1) // one unit per line
	return true
}

// verdict says whether the figures agree, and if not how.
func (c checkResult) verdict() (bool, string) {
	want := c.Created + c.UncertainCreated
	var bad []string
	if c.Orders != want {
		bad = append(bad, fmt.Sprintf("%d orders for %d 201 answers and %d uncertain requests that took effect", c.Orders, c.Created, c.UncertainCreated))
	}
	if c.Missing > 0 {
		bad = append(bad, fmt.Sprintf("%d 201 answers without an order", c.Missing))
	}
	if c.Unexpected > 0 {
		bad = append(bad, fmt.Sprintf("%d orders no 201 answer accounts for", c.Unexpected))
	}
	if c.WrongProduct > 0 {
		bad = append(bad, fmt.Sprintf("%d orders of the wrong product", c.WrongProduct))
	}
	if c.Units != c.WantUnits {
		bad = append(bad, fmt.Sprintf("the orders hold %d units, want %d (one per line)", c.Units, c.WantUnits))
	}
	if c.StockTaken != c.WantUnits {
		bad = append(bad, fmt.Sprintf("stock went down by %d, want %d", c.StockTaken, c.WantUnits))
	}
	return len(bad) == 0, strings.Join(bad, "; ")
}

// checkSale checks the database after flash sale s to buyers: their
// orders against their answers (as check does), the units the product's
// orders hold against the units on sale, and the stock left. It sets s's
// check and database figures.
func (b *bench) checkSale(ctx context.Context, buyers []user, s *saleResult) error {
	c, err := b.check(ctx, buyers, s.tallies(), int64(s.units))
	if err != nil {
		return err
	}
	if err := b.db.admin.QueryRow(ctx, `SELECT coalesce(sum(quantity), 0)::bigint FROM orders WHERE product_id = $1`, s.product).Scan(&s.soldUnits); err != nil {
		return fmt.Errorf("read the sale's orders: %w", err)
	}
	if err := b.db.admin.QueryRow(ctx, `SELECT available FROM product_stock WHERE product_id = $1`, s.product).Scan(&s.stockLeft); err != nil {
		return fmt.Errorf("read the sale's stock: %w", err)
	}
	s.check = c.withSale(int64(s.units), s.soldUnits, s.stockLeft)
	return nil
}

// withSale adds a flash sale's own conditions to c's verdict: no more
// units sold than were on sale, no negative stock, and every unit either
// sold or left.
func (c checkResult) withSale(units, sold, left int64) checkResult {
	var bad []string
	if c.Problem != "" {
		bad = append(bad, c.Problem)
	}
	if sold > units {
		bad = append(bad, fmt.Sprintf("%d units oversold: orders hold %d of %d", sold-units, sold, units))
	}
	if left < 0 {
		bad = append(bad, fmt.Sprintf("the stock went negative: %d", left))
	}
	if sold+left != units {
		bad = append(bad, fmt.Sprintf("%d units sold and %d left, of %d", sold, left, units))
	}
	c.OK, c.Problem = len(bad) == 0, strings.Join(bad, "; ")
	return c
}

// oversold is how many units a sale sold beyond those it had.
func (s *saleResult) oversold() int64 { return max(s.soldUnits-int64(s.units), 0) }
