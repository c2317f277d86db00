package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/quorumlock/quorumlock/orders/auth"
	"github.com/quorumlock/quorumlock/orders/store"
)

// Sides of the load.
const (
	sideDistinct = "distinct"
	sidePopular  = "popular"
)

const (
	// tokenTTL is the lifetime of the users' tokens: longer than any run,
	// within ordersd's default ORDERS_JWT_MAX_LIFETIME.
	tokenTTL = time.Hour
	// priceCents is every product's price: the orders wait unpaid, and
	// keep their stock for ordersd's order hold (15 minutes by default).
	priceCents = 1999
)

// user is one closed-loop client: its user id, bearer token and the one
// product it orders, one unit at a time.
type user struct {
	id            string
	authorization string // "Bearer <token>"
	product       string
	body          []byte // the POST /orders payload
}

// side is the clients of one kind and the products they order.
type side struct {
	name     string
	users    []user
	products []string
}

// makeSides returns the sides of c that have clients: each distinct client
// with a product of its own, every popular client with the one popular
// product. Ids start with run, unique to the invocation, so that the check
// finds the run's orders and stock by them.
func makeSides(c config, run string) ([]side, error) {
	var sides []side
	if c.distinct > 0 {
		s := side{name: sideDistinct}
		for i := range c.distinct {
			id := fmt.Sprintf("ol.%s.d%d", run, i+1)
			u, err := newUser(c.jwtSecret, id, id)
			if err != nil {
				return nil, err
			}
			s.users, s.products = append(s.users, u), append(s.products, id)
		}
		sides = append(sides, s)
	}
	if c.popular > 0 {
		product := "ol." + run + ".popular"
		s := side{name: sidePopular, products: []string{product}}
		for i := range c.popular {
			u, err := newUser(c.jwtSecret, fmt.Sprintf("ol.%s.p%d", run, i+1), product)
			if err != nil {
				return nil, err
			}
			s.users = append(s.users, u)
		}
		sides = append(sides, s)
	}
	return sides, nil
}

// newUser returns user id, with its token, ordering one unit of product.
func newUser(secret []byte, id, product string) (user, error) {
	tok, err := auth.Mint(secret, id, tokenTTL)
	if err != nil {
		return user{}, fmt.Errorf("token of %s: %w", id, err)
	}
	body, err := json.Marshal(map[string]any{"productId": product, "quantity": 1, "addressVersion": "v1", "couponId": nil})
	if err != nil {
		return user{}, fmt.Errorf("order body: %w", err)
	}
	return user{id: id, authorization: "Bearer " + tok, product: product, body: body}, nil
}

// idempotencyKey is the key of a user's n-th request: each request has a
// fresh one. seqOf reads n back.
func idempotencyKey(n int) string { return "k" + strconv.Itoa(n) }

// seqOf returns the n of idempotencyKey(n), or false for any other key.
func seqOf(key string) (int, bool) {
	if len(key) < 2 || key[0] != 'k' {
		return 0, false
	}
	n, err := strconv.Atoi(key[1:])
	return n, err == nil && n >= 0 && idempotencyKey(n) == key
}

// seed gives every product of sides stock units.
func seed(ctx context.Context, st *store.Store, sides []side, stock int64) error {
	for _, s := range sides {
		for _, p := range s.products {
			if err := st.SeedProduct(ctx, p, stock, priceCents); err != nil {
				return fmt.Errorf("seed: %w", err)
			}
		}
	}
	return nil
}
