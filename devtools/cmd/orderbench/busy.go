package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// busyPhases is a busy run's buyers of the popular product: beside the
// distinct clients, and alone.
type busyPhases struct {
	together, alone phase
}

// busyUsers is what a busy run orders with: the distinct clients and the
// popular product's buyers, a set of each per phase, and the products.
type busyUsers struct {
	distinct, distinctAlone []user
	hot, hotAlone           []user
	products                []string
	product                 string
}

// runBusy seeds the products, starts the instances of p's mode and runs
// three phases of closed-loop load, each a warm-up and then -duration:
// the distinct clients and the popular product's buyers together, the
// distinct clients alone, the buyers alone. The popular product's stock
// lasts the whole run. It stops everything and checks the database.
func (b *bench) runBusy(ctx context.Context, p runPlan) (*runResult, error) {
	u, err := b.busyUsers(ctx, p)
	if err != nil {
		return nil, err
	}
	ins, err := b.startInstances(ctx, p)
	if err != nil {
		return nil, err
	}
	together := b.phases(ctx, ins, u.distinct, u.hot)
	distinctAlone := b.phases(ctx, ins, u.distinctAlone)
	hotAlone := b.phases(ctx, ins, u.hotAlone)
	if err := b.stopInstances(ctx, ins); err != nil {
		return nil, err
	}
	users := slices.Concat(u.distinct, u.hot, u.distinctAlone, u.hotAlone)
	tallies := slices.Concat(together[0].tallies, together[1].tallies, distinctAlone[0].tallies, hotAlone[0].tallies)
	chk, err := b.check(ctx, users, tallies, int64(len(u.products)+1)*seedStock)
	if err != nil {
		return nil, fmt.Errorf("check the database: %w", err)
	}
	return &runResult{runPlan: p, window: together[0].window, tallies: together[0].tallies, peakConns: -1,
		alone: &distinctAlone[0], check: chk, busy: &busyPhases{together: together[1], alone: hotAlone[0]}}, nil
}

// busyUsers makes the users of a busy run and seeds their products.
func (b *bench) busyUsers(ctx context.Context, p runPlan) (*busyUsers, error) {
	u := &busyUsers{product: "busy." + p.tag()}
	var err error
	if u.distinct, u.products, err = b.users(p, "together"); err != nil {
		return nil, err
	}
	if u.distinctAlone, _, err = b.users(p, "alone"); err != nil {
		return nil, err
	}
	prefix := fmt.Sprintf("ob.%s.busy.%s", b.runID, p.tag())
	for _, phase := range []struct {
		name string
		to   *[]user
	}{{"together", &u.hot}, {"alone", &u.hotAlone}} {
		for i := range b.cfg.busyBuyers {
			bu, err := b.newUser(fmt.Sprintf("%s.%s.h%d", prefix, phase.name, i+1), u.product)
			if err != nil {
				return nil, err
			}
			*phase.to = append(*phase.to, bu)
		}
	}
	if err := b.seed(ctx, append(slices.Clone(u.products), u.product), seedStock); err != nil {
		return nil, err
	}
	return u, nil
}

// phases drives each set of users at once, for a warm-up and then a
// measured window of -duration, and returns one phase per set.
func (b *bench) phases(ctx context.Context, ins []*instance, sets ...[]user) []phase {
	start := time.Now().Add(b.cfg.warmup)
	w := fixedWindow(start, b.cfg.duration)
	stop, cancel := context.WithDeadline(ctx, start.Add(b.cfg.duration))
	defer cancel()
	out := make([]phase, len(sets))
	var wg sync.WaitGroup
	for i, users := range sets {
		wg.Go(func() { out[i].tallies = b.drive(ctx, stop, users, ins, w) })
	}
	wg.Wait()
	win := w.close()
	for i := range out {
		out[i].window, out[i].peakConns = win, -1
	}
	return out
}
