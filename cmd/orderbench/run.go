package main

import (
	"context"
	"fmt"
	"time"

	"github.com/quorumlock/quorumlock/orders/auth"
)

// Products and stock.
const (
	// hotProduct is the one product of the hot scenario.
	hotProduct = "42"
	// seedStock is every product's stock at the start of a run: more than
	// any run can sell (a million orders a second for the longest run
	// would take 600 million), so no answer is an out-of-stock one.
	seedStock = 1_000_000_000
	// priceCents is every product's price.
	priceCents = 1999
	// tokenTTL is the lifetime of the users' tokens: longer than a run.
	tokenTTL = time.Hour
)

// runResult is one (scenario, mode) run's raw figures.
type runResult struct {
	scenario, mode string
	window         window
	tallies        []*tally
	check          checkResult
}

// runOne seeds the products of scenario sc, starts the instances of mode,
// drives the load, stops everything and checks the database.
func (b *bench) runOne(ctx context.Context, sc, mode string) (*runResult, error) {
	users, products, err := b.users(sc, mode)
	if err != nil {
		return nil, err
	}
	for _, p := range products {
		if err := b.st.SeedProduct(ctx, p, seedStock, priceCents); err != nil {
			return nil, fmt.Errorf("seed: %w", err)
		}
	}
	ins, err := b.startInstances(ctx, mode)
	if err != nil {
		return nil, err
	}
	tallies, w := b.drive(ctx, users, ins)
	cerr := closeInstances(ins)
	b.transport.CloseIdleConnections()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, fmt.Errorf("stop the instances: %w", cerr)
	}
	chk, err := b.check(ctx, users, tallies, int64(len(products))*seedStock)
	if err != nil {
		return nil, fmt.Errorf("check the database: %w", err)
	}
	return &runResult{scenario: sc, mode: mode, window: w, tallies: tallies, check: chk}, nil
}

// users returns the run's users, each with its token and order, and the
// products they order. User ids are unique to the run, so the check finds
// the run's orders by them.
func (b *bench) users(sc, mode string) ([]user, []string, error) {
	users := make([]user, b.cfg.clients)
	var products []string
	if sc == scenarioHot {
		products = []string{hotProduct}
	}
	for i := range users {
		u := user{id: fmt.Sprintf("ob.%s.%s.%s.u%d", b.runID, sc, mode, i+1), product: hotProduct}
		if sc == scenarioDistinct {
			u.product = fmt.Sprintf("p%d", i+1)
			products = append(products, u.product)
		}
		tok, err := auth.Mint(b.secret, u.id, tokenTTL)
		if err != nil {
			return nil, nil, fmt.Errorf("token of %s: %w", u.id, err)
		}
		u.authorization = "Bearer " + tok
		if u.body, err = orderBody(u.product); err != nil {
			return nil, nil, err
		}
		users[i] = u
	}
	return users, products, nil
}
