package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
)

// The cart scenario's carts.
const (
	// cartProducts is how many products the carts of a run pick from.
	cartProducts = 10
	// cartLines is how many distinct products each cart holds, one unit
	// of each.
	cartLines = 3
)

// cartDeck draws one user's carts: cartLines distinct products picked at
// random out of products, one unit each, named in random order. Its
// draws follow the seed and the user's index, so both modes send the same
// carts. One user's loop alone uses it.
type cartDeck struct {
	products []string
	lines    [][]byte // lines[i]: the JSON line of one unit of products[i]
	idx      []int    // a permutation of the products' indices
	rng      *rand.Rand
}

// newCartDeck returns the deck of user number user.
func newCartDeck(products []string, seed uint64, user int) (*cartDeck, error) {
	d := &cartDeck{products: products, lines: make([][]byte, len(products)), idx: make([]int, len(products)),
		rng: rand.New(rand.NewPCG(seed, uint64(user)))}
	for i, p := range products {
		l, err := json.Marshal(struct {
			ProductID string `json:"productId"`
			Quantity  int    `json:"quantity"`
		}{p, 1})
		if err != nil {
			return nil, fmt.Errorf("cart line: %w", err)
		}
		d.lines[i] = l
		d.idx[i] = i
	}
	return d, nil
}

// next returns the POST /orders payload of the next cart, its lines in
// the random order of the draw, and the cart's products sorted (byte-wise)
// and joined by "," (how the check names an order's lines).
func (d *cartDeck) next() (body []byte, products string) {
	body = append(make([]byte, 0, 160), `{"items":[`...)
	picked := make([]string, cartLines)
	for i := range cartLines {
		// A partial Fisher-Yates shuffle: distinct products, in random order.
		j := i + d.rng.IntN(len(d.idx)-i)
		d.idx[i], d.idx[j] = d.idx[j], d.idx[i]
		if i > 0 {
			body = append(body, ',')
		}
		body = append(body, d.lines[d.idx[i]]...)
		picked[i] = d.products[d.idx[i]]
	}
	body = append(body, `],"addressVersion":"v1","couponId":null}`...)
	slices.Sort(picked)
	return body, strings.Join(picked, ",")
}

// cartUsers returns the closed-loop clients of a cart plan, each with its
// token and deck, and the plan's products: cartProducts of its own, so
// that the per-product check of order_lines counts only its orders.
func (b *bench) cartUsers(p runPlan, prefix string) ([]user, []string, error) {
	products := make([]string, cartProducts)
	for i := range products {
		products[i] = fmt.Sprintf("cart.%d.%s.%d", p.clients, p.tag(), i+1)
	}
	users := make([]user, p.clients)
	for i := range users {
		u := user{id: fmt.Sprintf("%s.u%d", prefix, i+1)}
		var err error
		if u.authorization, err = b.bearer(u.id); err != nil {
			return nil, nil, err
		}
		if u.cart, err = newCartDeck(products, b.cfg.flash.seed, i); err != nil {
			return nil, nil, err
		}
		users[i] = u
	}
	return users, products, nil
}

// productLines is one product of a cart run once the run is over: the
// stock it was seeded with, the stock left, and the units every order's
// lines of it hold. Left + Sold must equal Seeded: no unit oversold, none
// lost.
type productLines struct {
	Product string `json:"product"`
	Seeded  int64  `json:"seeded"`
	Left    int64  `json:"left"`
	Sold    int64  `json:"sold_in_order_lines"`
}

// productLinesSQL reads, per product, the stock left and the units the
// order lines hold.
const productLinesSQL = `SELECT ps.product_id, ps.available,
  coalesce((SELECT sum(l.quantity) FROM order_lines l WHERE l.product_id = ps.product_id), 0)::bigint
FROM product_stock ps WHERE ps.product_id = ANY($1) ORDER BY ps.product_id`

// checkLines reads every product of products (each seeded with seeded
// units) and adds the per-product condition to c's verdict.
func (b *bench) checkLines(ctx context.Context, products []string, seeded int64, c checkResult) (checkResult, error) {
	rows, err := b.db.admin.Query(ctx, productLinesSQL, products)
	if err != nil {
		return c, fmt.Errorf("read the products' lines: %w", err)
	}
	defer rows.Close()
	var ps []productLines
	for rows.Next() {
		pl := productLines{Seeded: seeded}
		if err := rows.Scan(&pl.Product, &pl.Left, &pl.Sold); err != nil {
			return c, fmt.Errorf("read the products' lines: %w", err)
		}
		ps = append(ps, pl)
	}
	if err := rows.Err(); err != nil {
		return c, fmt.Errorf("read the products' lines: %w", err)
	}
	return c.withLines(ps, len(products)), nil
}

// withLines adds a cart run's per-product conditions to c's verdict: all
// want products read, and for each the stock left plus the units sold in
// order lines equal to the units seeded, with no negative stock.
func (c checkResult) withLines(ps []productLines, want int) checkResult {
	c.Products = ps
	var bad []string
	if c.Problem != "" {
		bad = append(bad, c.Problem)
	}
	if len(ps) != want {
		bad = append(bad, fmt.Sprintf("%d of the %d products found", len(ps), want))
	}
	for _, p := range ps {
		switch {
		case p.Left < 0:
			bad = append(bad, fmt.Sprintf("product %s: the stock went negative: %d", p.Product, p.Left))
		case p.Left+p.Sold > p.Seeded:
			bad = append(bad, fmt.Sprintf("product %s: %d units oversold: %d left + %d in order lines, of %d",
				p.Product, p.Left+p.Sold-p.Seeded, p.Left, p.Sold, p.Seeded))
		case p.Left+p.Sold < p.Seeded:
			bad = append(bad, fmt.Sprintf("product %s: %d units lost: %d left + %d in order lines, of %d",
				p.Product, p.Seeded-p.Left-p.Sold, p.Left, p.Sold, p.Seeded))
		}
	}
	c.OK, c.Problem = len(bad) == 0, strings.Join(bad, "; ")
	return c
}
