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
	// seedStock is every closed-loop product's stock at the start of a
	// run: more than
	// any run can sell (a million orders a second for the longest run
	// would take 600 million), so no answer is an out-of-stock one.
	seedStock = 1_000_000_000
	// priceCents is every product's price.
	priceCents = 1999
	// tokenTTL is the lifetime of the users' tokens: longer than a run.
	tokenTTL = time.Hour
)

// runResult is one run's raw figures.
type runResult struct {
	runPlan
	// window and tallies are the closed-loop clients' measured load: the
	// whole run of distinct and hot, mixed's during the sale; none for
	// flash.
	window  window
	tallies []*tally
	// peakConns is the peak of database connections in use during window
	// (mixed only; -1 when no sample was taken).
	peakConns int
	// alone is mixed's closed-loop clients without the sale (busy's
	// distinct clients alone).
	alone *phase
	// check is the database check of the closed-loop clients (of both of
	// mixed's phases), or flash's sale's.
	check checkResult
	// sale is the flash sale of flash and mixed.
	sale *saleResult
	// busy is busy's buyers of the popular product; window, tallies and
	// alone are its distinct clients'.
	busy *busyPhases
	// cpu is the CPU split of a closed-loop run's window (-cpu-split).
	cpu *cpuWindow
	// primaryBefore and primaryAfter name the HA group's primary before
	// and after a run on the group ("" for a run on the single Postgres).
	primaryBefore, primaryAfter string
}

// phase is one closed-loop load: its measured window, its clients'
// tallies, and the peak of database connections in use during the window
// (-1 when no sample was taken).
type phase struct {
	window    window
	tallies   []*tally
	peakConns int
}

// runOne makes one run of plan p.
func (b *bench) runOne(ctx context.Context, p runPlan) (*runResult, error) {
	switch p.scenario {
	case scenarioFlash:
		return b.runFlash(ctx, p)
	case scenarioMixed:
		return b.runMixed(ctx, p)
	case scenarioBusy:
		return b.runBusy(ctx, p)
	}
	return b.runLoad(ctx, p)
}

// runLoad seeds the products of a closed-loop plan, starts the instances
// of its mode, drives the load, stops everything and checks the database.
func (b *bench) runLoad(ctx context.Context, p runPlan) (*runResult, error) {
	users, products, err := b.users(p, "")
	if err != nil {
		return nil, err
	}
	if err := b.seed(ctx, products, seedStock); err != nil {
		return nil, err
	}
	ins, err := b.startInstances(ctx, p)
	if err != nil {
		return nil, err
	}
	start := time.Now().Add(b.cfg.warmup)
	w := fixedWindow(start, b.cfg.duration)
	stop, cancel := context.WithDeadline(ctx, start.Add(b.cfg.duration))
	var cpu func() *cpuWindow
	if b.meter != nil {
		cpu = b.meter.measure(ctx, w)
	}
	tallies := b.drive(ctx, stop, users, ins, w)
	cancel()
	r := &runResult{runPlan: p, window: w.close(), tallies: tallies, peakConns: -1}
	if cpu != nil {
		r.cpu = cpu()
	}
	if err := b.stopInstances(ctx, ins); err != nil {
		return nil, err
	}
	chk, err := b.check(ctx, users, tallies, int64(len(products))*seedStock)
	if err == nil && p.scenario == scenarioCart {
		chk, err = b.checkLines(ctx, products, seedStock, chk)
	}
	if err != nil {
		return nil, fmt.Errorf("check the database: %w", err)
	}
	r.check = chk
	return r, nil
}

// seed gives every product of products stock units.
func (b *bench) seed(ctx context.Context, products []string, stock int64) error {
	for _, p := range products {
		if err := b.db.st.SeedProduct(ctx, p, stock, priceCents); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
	}
	return nil
}

// stopInstances closes ins, once every loop has stopped, and the idle
// connections to them. It fails when ctx ended: the run is cut short.
func (b *bench) stopInstances(ctx context.Context, ins []*instance) error {
	cerr := closeInstances(ins)
	b.transport.CloseIdleConnections()
	if err := ctx.Err(); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("stop the instances: %w", cerr)
	}
	return nil
}

// users returns the closed-loop clients of plan p (of its phase, for
// mixed), each with its token and order (its cart deck, for cart), and
// the products they order.
// User ids are unique to the run and phase, so the check finds their
// orders by them.
func (b *bench) users(p runPlan, phase string) ([]user, []string, error) {
	prefix := fmt.Sprintf("ob.%s.%s-%d.%s", b.runID, p.scenario, p.clients, p.tag())
	if phase != "" {
		prefix += "." + phase
	}
	if p.scenario == scenarioCart {
		return b.cartUsers(p, prefix)
	}
	users := make([]user, p.clients)
	var products []string
	if p.scenario == scenarioHot {
		products = []string{hotProduct}
	}
	for i := range users {
		product := hotProduct
		if p.scenario != scenarioHot {
			product = fmt.Sprintf("p%d", i+1)
			products = append(products, product)
		}
		u, err := b.newUser(fmt.Sprintf("%s.u%d", prefix, i+1), product)
		if err != nil {
			return nil, nil, err
		}
		users[i] = u
	}
	return users, products, nil
}

// newUser returns user id, with its token, ordering one unit of product.
func (b *bench) newUser(id, product string) (user, error) {
	u := user{id: id, product: product}
	var err error
	if u.authorization, err = b.bearer(id); err != nil {
		return u, err
	}
	if u.body, err = orderBody(product); err != nil {
		return u, err
	}
	return u, nil
}

// bearer returns the Authorization header of user id.
func (b *bench) bearer(id string) (string, error) {
	tok, err := auth.Mint(b.secret, id, tokenTTL)
	if err != nil {
		return "", fmt.Errorf("token of %s: %w", id, err)
	}
	return "Bearer " + tok, nil
}
