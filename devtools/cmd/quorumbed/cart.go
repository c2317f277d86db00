package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/quorumlock/quorumlock/devtools/audit"
)

// cartScenario has two users buy the same cart of two products, each with
// one unit in stock, at the same moment, on two instances, naming the
// products in opposite orders: one multi-key lease on both stock keys
// decides, so one cart is sold whole and the other gets a 409 naming its
// short lines, nothing deadlocks, and no product is sold in part.
func cartScenario(ctx context.Context, procs []*ordersdProc, runTool func(args ...string) (string, error), dsn string, out io.Writer) error {
	for _, p := range [][]string{{"7", "500"}, {"9", "300"}} {
		if _, err := runTool("seed", "-product", p[0], "-stock", "1", "-price", p[1]); err != nil {
			return err
		}
	}
	bodies := []string{
		`{"items": [{"productId": "7", "quantity": 1}, {"productId": "9", "quantity": 1}], "addressVersion": "v1"}`,
		`{"items": [{"productId": "9", "quantity": 1}, {"productId": "7", "quantity": 1}], "addressVersion": "v1"}`,
	}
	users := []string{"u2001", "u2002"}
	fmt.Fprintf(out, "\nproducts 7 and 9 have 1 unit each; u2001 and u2002 buy the same cart at once, naming them in opposite orders\n")
	results := make([]demoResult, 2)
	var wg sync.WaitGroup
	for i, u := range users {
		token, err := runTool("token", "-user", u, "-ttl", "10m")
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "  %s -> %s: POST /orders, Idempotency-Key: cart-1\n    %s\n", u, procs[i].name, bodies[i])
		wg.Go(func() { results[i] = postOrder(ctx, procs[i].url, token, "cart-1", bodies[i]) })
	}
	wg.Wait()
	var resps []audit.Response
	created := 0
	for i, r := range results {
		if r.err != nil {
			return fmt.Errorf("%s: %w", procs[i].name, r.err)
		}
		fmt.Fprintf(out, "  %s <- %d %s\n", users[i], r.status, r.body)
		if r.status == http.StatusCreated {
			created++
		}
		resps = append(resps, audit.Response{UserID: users[i], IdempotencyKey: "cart-1", Status: r.status, Body: r.body, OrderID: r.orderID})
	}
	rows, stock, err := cartState(ctx, dsn, "7", "9")
	if err != nil {
		return err
	}
	verdict := audit.Orders(map[string]audit.Stock{"7": {Initial: 1, Final: stock[0]}, "9": {Initial: 1, Final: stock[1]}}, rows, resps)
	fmt.Fprintf(out, "cart orders in Postgres: %d, stock left: 7=%d 9=%d\naudit: %v\n", len(rows), stock[0], stock[1], verdict)
	if !verdict.OK() || created != 1 || len(rows) != 1 || stock[0] != 0 || stock[1] != 0 {
		return errors.New("the cart scenario did not end with one cart sold whole and the other refused")
	}
	return nil
}

// cartState reads the orders of the cart users with their lines, and the
// stock of products.
func cartState(ctx context.Context, dsn string, products ...string) ([]audit.OrderRow, []int64, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT o.order_id, o.user_id, o.idempotency_key, o.quantity, o.status, l.product_id, l.quantity
FROM orders o JOIN order_lines l ON l.order_id = o.order_id
WHERE o.user_id IN ('u2001', 'u2002') ORDER BY o.order_id, l.product_id`)
	if err != nil {
		return nil, nil, err
	}
	var (
		out []audit.OrderRow
		o   audit.OrderRow
		l   audit.Line
	)
	_, err = pgx.ForEachRow(rows, []any{&o.OrderID, &o.UserID, &o.IdempotencyKey, &o.Quantity, &o.Status, &l.ProductID, &l.Quantity}, func() error {
		if n := len(out); n == 0 || out[n-1].OrderID != o.OrderID {
			out = append(out, audit.OrderRow{OrderID: o.OrderID, UserID: o.UserID, IdempotencyKey: o.IdempotencyKey, Quantity: o.Quantity, Status: o.Status})
		}
		out[len(out)-1].Lines = append(out[len(out)-1].Lines, l)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	stock := make([]int64, len(products))
	for i, p := range products {
		if err := conn.QueryRow(ctx, "SELECT available FROM product_stock WHERE product_id = $1", p).Scan(&stock[i]); err != nil {
			return nil, nil, err
		}
	}
	return out, stock, nil
}
