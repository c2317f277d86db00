package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quorumlock/quorumlock/orders/store"
)

// checkResult is the database check of one run, made once the instances
// have answered every request (or -settle ran out). The database must hold
// exactly one order per 201 answer, with the product the request named,
// and no other order of the run's users but for requests whose outcome
// they could not learn; every product of the run must have available +
// sold = seeded, and none a negative stock; and ordersd's own invariants
// must hold.
type checkResult struct {
	OK bool `json:"ok"`
	// Created counts the run's 201 answers, warm-up and requests answered
	// after the window included.
	Created int `json:"created_answers"`
	// Uncertain counts requests whose outcome the client could not learn
	// (timeouts above all); UncertainCreated those of them that have an
	// order.
	Uncertain        int `json:"uncertain"`
	UncertainCreated int `json:"uncertain_created"`
	// Orders are the orders of the run's users in the database.
	Orders int `json:"orders_in_db"`
	// Missing counts 201s without an order, Unexpected orders no 201 or
	// uncertain request accounts for, WrongProduct orders of another
	// product than the request's or of more than one unit.
	Missing      int `json:"missing"`
	Unexpected   int `json:"unexpected"`
	WrongProduct int `json:"wrong_product"`
	// Products counts the run's products checked; Negative those whose
	// stock went below zero, Unbalanced those whose available + sold is
	// not the stock seeded or whose sold units are not the units of the
	// run's orders.
	Products   int `json:"products"`
	Negative   int `json:"negative_stock"`
	Unbalanced int `json:"unbalanced"`
	// Invariants are the violations store.CheckInvariants found in the
	// whole database.
	Invariants []string `json:"invariant_violations,omitempty"`
	// Problem says what is wrong when OK is false.
	Problem string `json:"problem,omitempty"`
}

// dbOrder is one order of a run's user: its lines' products, sorted and
// joined by ",", and their units.
type dbOrder struct {
	user, key, products string
	units               int64
}

// stockRow is one product's stock: available and stocked from
// product_stock, sold the units of its order lines that hold stock (every
// order state but CANCELLED).
type stockRow struct {
	product                  string
	available, stocked, sold int64
}

// Queries of the check.
const (
	ordersSQL = `SELECT o.user_id, o.idempotency_key,
  coalesce(string_agg(l.product_id, ',' ORDER BY l.product_id COLLATE "C"), ''), coalesce(sum(l.quantity), 0)::bigint
FROM orders o LEFT JOIN order_lines l ON l.order_id = o.order_id
WHERE o.user_id = ANY($1) GROUP BY o.order_id, o.user_id, o.idempotency_key`
	stockSQL = `SELECT ps.product_id, ps.available, ps.stocked,
  coalesce((SELECT sum(l.quantity) FROM order_lines l JOIN orders o ON o.order_id = l.order_id
            WHERE l.product_id = ps.product_id AND o.status <> 'CANCELLED'), 0)::bigint
FROM product_stock ps WHERE ps.product_id = ANY($1)`
)

// checkDB reads the run's orders and stock in one snapshot, and the
// database's invariants, and compares them with what the clients were
// told. seeded is every product's stock at the start.
func checkDB(ctx context.Context, pool *pgxpool.Pool, sides []side, tallies [][]*tally, seeded int64) (checkResult, error) {
	var ids, products []string
	for _, s := range sides {
		for _, u := range s.users {
			ids = append(ids, u.id)
		}
		products = append(products, s.products...)
	}
	var orders []dbOrder
	var stock []stockRow
	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		if orders, err = readOrders(ctx, tx, ids); err != nil {
			return err
		}
		stock, err = readStock(ctx, tx, products)
		return err
	})
	if err != nil {
		return checkResult{}, err
	}
	c := reconcile(sides, tallies, orders)
	c.balance(stock, products, seeded, unitsByProduct(orders))
	vs, err := store.CheckInvariants(ctx, pool)
	if err != nil {
		return checkResult{}, fmt.Errorf("invariants: %w", err)
	}
	for _, v := range vs {
		c.Invariants = append(c.Invariants, v.String())
	}
	c.OK, c.Problem = c.verdict()
	return c, nil
}

// readOrders reads the orders of the users ids.
func readOrders(ctx context.Context, tx pgx.Tx, ids []string) ([]dbOrder, error) {
	rows, err := tx.Query(ctx, ordersSQL, ids)
	if err != nil {
		return nil, fmt.Errorf("read orders: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (dbOrder, error) {
		var o dbOrder
		err := r.Scan(&o.user, &o.key, &o.products, &o.units)
		return o, err
	})
	if err != nil {
		return nil, fmt.Errorf("read orders: %w", err)
	}
	return out, nil
}

// readStock reads the stock of products.
func readStock(ctx context.Context, tx pgx.Tx, products []string) ([]stockRow, error) {
	rows, err := tx.Query(ctx, stockSQL, products)
	if err != nil {
		return nil, fmt.Errorf("read stock: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (stockRow, error) {
		var s stockRow
		err := r.Scan(&s.product, &s.available, &s.stocked, &s.sold)
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("read stock: %w", err)
	}
	return out, nil
}

// unitsByProduct sums the units of one-product orders by product.
func unitsByProduct(orders []dbOrder) map[string]int64 {
	m := map[string]int64{}
	for _, o := range orders {
		m[o.products] += o.units
	}
	return m
}

// reconcile matches the orders of the run's users with the answers they
// got: tallies[i][j] is sides[i].users[j]'s.
func reconcile(sides []side, tallies [][]*tally, orders []dbOrder) checkResult {
	type userOrders struct {
		u     user
		found map[int]dbOrder
	}
	byID := map[string]*userOrders{}
	for _, s := range sides {
		for _, u := range s.users {
			byID[u.id] = &userOrders{u: u, found: map[int]dbOrder{}}
		}
	}
	var c checkResult
	for _, o := range orders {
		c.Orders++
		uo, ok := byID[o.user]
		n, seq := seqOf(o.key)
		if !ok || !seq {
			c.Unexpected++
			continue
		}
		uo.found[n] = o // UNIQUE (user_id, idempotency_key): at most one
	}
	for i, s := range sides {
		for j, u := range s.users {
			t, uo := tallies[i][j], byID[u.id]
			c.Created += len(t.created)
			c.Uncertain += len(t.uncertain)
			for _, n := range t.created {
				if !c.take(uo.found, n, u) {
					c.Missing++
				}
			}
			for _, n := range t.uncertain {
				if c.take(uo.found, n, u) {
					c.UncertainCreated++
				}
			}
			c.Unexpected += len(uo.found)
		}
	}
	return c
}

// take reports whether found holds an order for request n of u, and takes
// it off, counting it in WrongProduct unless it is one unit of u's product.
func (c *checkResult) take(found map[int]dbOrder, n int, u user) bool {
	o, ok := found[n]
	if !ok {
		return false
	}
	delete(found, n)
	if o.products != u.product || o.units != 1 {
		c.WrongProduct++
	}
	return true
}

// balance checks every product of the run: no negative stock, available +
// sold = seeded (and stocked = seeded: nothing restocked it), and sold =
// the units of the run's orders of it (units).
func (c *checkResult) balance(rows []stockRow, products []string, seeded int64, units map[string]int64) {
	c.Products = len(products)
	if len(rows) != len(products) {
		c.Unbalanced += len(products) - len(rows)
	}
	for _, r := range rows {
		if r.available < 0 {
			c.Negative++
		}
		if r.available+r.sold != seeded || r.stocked != seeded || r.sold != units[r.product] {
			c.Unbalanced++
		}
	}
}

// verdict says whether the figures agree, and if not how.
func (c checkResult) verdict() (bool, string) {
	var bad []string
	if want := c.Created + c.UncertainCreated; c.Orders != want {
		bad = append(bad, fmt.Sprintf("%d orders for %d 201 answers and %d uncertain requests that took effect", c.Orders, c.Created, c.UncertainCreated))
	}
	for _, f := range []struct {
		n    int
		what string
	}{
		{c.Missing, "201 answers without an order"},
		{c.Unexpected, "orders no 201 (nor uncertain request) accounts for"},
		{c.WrongProduct, "orders of another product or quantity than requested"},
		{c.Negative, "products with a negative stock"},
		{c.Unbalanced, "products whose available + sold is not the stock seeded, or whose sold units are not their orders'"},
		{len(c.Invariants), "invariant violations: " + strings.Join(c.Invariants, "; ")},
	} {
		if f.n > 0 {
			bad = append(bad, fmt.Sprintf("%d %s", f.n, f.what))
		}
	}
	return len(bad) == 0, strings.Join(bad, "; ")
}
