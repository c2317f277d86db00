package main

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// mixedRun is what a mixed run orders with: the closed-loop clients of
// each phase, their products, and the buyers of the sale.
type mixedRun struct {
	during, alone []user
	products      []string
	product       string
	buyers        []user
}

// runMixed seeds the products, starts the instances of p's mode, and runs
// the closed-loop clients with a flash sale, then without one for as long;
// it stops everything and checks the database: the clients' orders (of
// both phases together) and the sale's.
func (b *bench) runMixed(ctx context.Context, p runPlan) (*runResult, error) {
	m, err := b.mixedUsers(ctx, p)
	if err != nil {
		return nil, err
	}
	ins, err := b.startInstances(ctx, p)
	if err != nil {
		return nil, err
	}
	during, sale := b.duringSale(ctx, ins, m)
	alone := b.withoutSale(ctx, ins, m.alone, during.window.end.Sub(during.window.start))
	if err := b.stopInstances(ctx, ins); err != nil {
		return nil, err
	}
	chk, err := b.check(ctx, slices.Concat(m.during, m.alone), slices.Concat(during.tallies, alone.tallies), int64(len(m.products))*seedStock)
	if err != nil {
		return nil, fmt.Errorf("check the database: %w", err)
	}
	if err := b.checkSale(ctx, m.buyers, sale); err != nil {
		return nil, fmt.Errorf("check the database: %w", err)
	}
	return &runResult{runPlan: p, window: during.window, tallies: during.tallies, peakConns: during.peakConns,
		alone: &alone, check: chk, sale: sale}, nil
}

// mixedUsers makes the users of a mixed run and seeds their products.
func (b *bench) mixedUsers(ctx context.Context, p runPlan) (*mixedRun, error) {
	m := &mixedRun{product: "mixed." + p.tag()}
	var err error
	if m.during, m.products, err = b.users(p, "during"); err != nil {
		return nil, err
	}
	if m.alone, _, err = b.users(p, "alone"); err != nil {
		return nil, err
	}
	if m.buyers, err = b.buyers(p, m.product); err != nil {
		return nil, err
	}
	if err := b.seed(ctx, m.products, seedStock); err != nil {
		return nil, err
	}
	if err := b.seed(ctx, []string{m.product}, int64(b.cfg.flash.units)); err != nil {
		return nil, err
	}
	return m, nil
}

// duringSale runs m's closed-loop clients, and after the warm-up the flash
// sale to m's buyers. The measured window starts with the sale and ends
// once every buyer has its final answer or gave up, and -duration after
// its start at the earliest; then the clients stop.
func (b *bench) duringSale(ctx context.Context, ins []*instance, m *mixedRun) (phase, *saleResult) {
	w := openWindow(time.Now().Add(b.cfg.warmup))
	stop, cancel := context.WithCancel(ctx)
	defer cancel()
	var tallies []*tally
	done := make(chan struct{})
	go func() {
		defer close(done)
		tallies = b.drive(ctx, stop, m.during, ins, w)
	}()
	stopSampling := b.sampleConns(ctx, w)
	sale := b.sell(ctx, ins, m.buyers, m.product, w.start)
	sleepUntil(ctx, w.start.Add(b.cfg.duration))
	win := w.close()
	cancel()
	peak := stopSampling()
	<-done
	sale.peakConns = peak
	return phase{window: win, tallies: tallies, peakConns: peak}, sale
}

// withoutSale runs the closed-loop clients users alone: a warm-up, then a
// measured window of length d.
func (b *bench) withoutSale(ctx context.Context, ins []*instance, users []user, d time.Duration) phase {
	start := time.Now().Add(b.cfg.warmup)
	w := fixedWindow(start, d)
	stop, cancel := context.WithDeadline(ctx, start.Add(d))
	defer cancel()
	stopSampling := b.sampleConns(ctx, w)
	tallies := b.drive(ctx, stop, users, ins, w)
	return phase{window: w.close(), tallies: tallies, peakConns: stopSampling()}
}
