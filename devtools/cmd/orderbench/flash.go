package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/orders/problem"
)

// A buyer's bounds, in this benchmark.
const (
	// maxRetryWait bounds the wait before a retry, whatever Retry-After
	// says; an answer without one waits this long.
	maxRetryWait = time.Second
	// maxBuyerTries bounds a buyer's requests.
	maxBuyerTries = 30
	// maxBuyerTime bounds a buyer's time from its first request: no
	// request starts later.
	maxBuyerTime = 60 * time.Second
)

// Answer keys of a sale.
var (
	answerOutOfStock = strconv.Itoa(http.StatusConflict) + " " + problem.CodeOutOfStock
	answerInProgress = strconv.Itoa(http.StatusAccepted)
	// answerNone counts the buyers that ran out of tries or time.
	answerNone = "none"
)

// buyerResult is what one buyer of a flash sale saw.
type buyerResult struct {
	first    time.Time // its first request (zero: it never sent one)
	answered time.Time // its final answer (zero: none)
	// final is the key of the answer that ended the buyer: a 201 or a 409
	// out of stock, or any answer a retry cannot change; "" when it ran
	// out of tries or time.
	final string
	tries int
	// busy counts its 503 answers.
	busy int
	// uncertain: a request whose outcome it could not learn (no answer,
	// 503 outcome_unknown, or in progress).
	uncertain  bool
	firstError string
}

// saleResult is one flash sale's raw figures.
type saleResult struct {
	product string
	units   int
	start   time.Time
	buyers  []buyerResult
	// peakConns is the peak of database connections in use during the
	// sale (-1 when no sample was taken).
	peakConns int
	// The database after the sale: the units its orders hold, the stock
	// left, and the check of the buyers' orders against their answers.
	soldUnits, stockLeft int64
	check                checkResult
}

// runFlash seeds the sale's product, starts the instances of p's mode,
// runs the sale, stops everything and checks the database.
func (b *bench) runFlash(ctx context.Context, p runPlan) (*runResult, error) {
	product := "flash." + p.tag()
	buyers, err := b.buyers(p, product)
	if err != nil {
		return nil, err
	}
	if err := b.seed(ctx, []string{product}, int64(b.cfg.flash.units)); err != nil {
		return nil, err
	}
	ins, err := b.startInstances(ctx, p)
	if err != nil {
		return nil, err
	}
	w := openWindow(time.Now())
	stopSampling := b.sampleConns(ctx, w)
	sale := b.sell(ctx, ins, buyers, product, w.start)
	w.close()
	sale.peakConns = stopSampling()
	if err := b.stopInstances(ctx, ins); err != nil {
		return nil, err
	}
	if err := b.checkSale(ctx, buyers, sale); err != nil {
		return nil, fmt.Errorf("check the database: %w", err)
	}
	return &runResult{runPlan: p, peakConns: -1, check: sale.check, sale: sale}, nil
}

// buyers returns the buyers of plan p's sale of product, each with its
// token. Their ids are unique to the run.
func (b *bench) buyers(p runPlan, product string) ([]user, error) {
	buyers := make([]user, b.cfg.flash.buyers)
	for i := range buyers {
		u, err := b.newUser(fmt.Sprintf("ob.%s.%s.%s.b%d", b.runID, p.scenario, p.tag(), i+1), product)
		if err != nil {
			return nil, err
		}
		buyers[i] = u
	}
	return buyers, nil
}

// sell runs a flash sale of product, which starts at start, to buyers on
// ins. It returns once every buyer has its final answer or gave up.
func (b *bench) sell(ctx context.Context, ins []*instance, buyers []user, product string, start time.Time) *saleResult {
	offsets := schedule(len(buyers), b.cfg.flash.spread, b.cfg.flash.seed)
	s := &saleResult{product: product, units: b.cfg.flash.units, start: start, buyers: make([]buyerResult, len(buyers))}
	var wg sync.WaitGroup
	for i, u := range buyers {
		wg.Go(func() { s.buyers[i] = b.buy(ctx, u, i, ins, start.Add(offsets[i])) })
	}
	wg.Wait()
	return s
}

// schedule draws n offsets uniformly in [0, spread) from seed: every run
// with the same seed gets the same schedule.
func schedule(n int, spread time.Duration, seed uint64) []time.Duration {
	rng := rand.New(rand.NewPCG(seed, 0x0b5e11))
	out := make([]time.Duration, n)
	if spread <= 0 {
		return out
	}
	for i := range out {
		out[i] = time.Duration(rng.Int64N(int64(spread)))
	}
	return out
}

// buy is buyer u's requests, all with one Idempotency-Key, the first at
// at, round-robin over ins from instance i: it retries until its final
// answer, for at most maxBuyerTries requests and maxBuyerTime.
func (b *bench) buy(ctx context.Context, u user, i int, ins []*instance, at time.Time) buyerResult {
	var r buyerResult
	if !sleepUntil(ctx, at) {
		return r
	}
	r.first = time.Now()
	giveUp := r.first.Add(maxBuyerTime)
	var wait time.Duration
	for r.tries < maxBuyerTries {
		if r.tries > 0 {
			next := time.Now().Add(wait)
			if next.After(giveUp) || !sleepUntil(ctx, next) {
				break
			}
		}
		rep, err := b.post(ctx, ins[(i+r.tries)%len(ins)].srv.URL, u, idempotencyKey(0))
		now := time.Now()
		r.tries++
		var final bool
		if wait, final = r.note(rep, err); final {
			r.answered = now
			break
		}
	}
	return r
}

// note records one request's answer, and says whether it ends the buyer
// or how long to wait before the next request.
func (r *buyerResult) note(rep reply, err error) (time.Duration, bool) {
	switch {
	case err != nil:
		r.uncertain = true
		if r.firstError == "" {
			r.firstError = err.Error()
		}
		return maxRetryWait, false
	case strings.HasPrefix(rep.key, strconv.Itoa(http.StatusServiceUnavailable)):
		r.busy++
		r.uncertain = r.uncertain || rep.key == answerOutcomeUnknown
	case rep.key == answerInProgress || rep.key == strconv.Itoa(http.StatusConflict)+" "+problem.CodeRequestInProgress:
		// An earlier request with the key is still under way.
		r.uncertain = true
	default:
		// A 201, a 409 out of stock, or an answer no retry changes.
		r.final = rep.key
		return 0, true
	}
	if rep.retryAfter < 0 {
		return maxRetryWait, false
	}
	return min(rep.retryAfter, maxRetryWait), false
}

// isFinal reports whether the buyer got a final answer: a 201 or a 409
// out of stock.
func (r buyerResult) isFinal() bool { return r.final == answerCreated || r.final == answerOutOfStock }

// tallies turns the buyers' answers into the check's tallies: each buyer
// sent one key, request number 0.
func (s *saleResult) tallies() []*tally {
	out := make([]*tally, len(s.buyers))
	for i, r := range s.buyers {
		t := &tally{}
		switch {
		case r.final == answerCreated:
			t.createdSeqs = []int{0}
		case r.final == answerOutOfStock:
			// The key's saved outcome: no order, whatever came before.
		case r.uncertain || r.final != "":
			// An earlier request may have placed it, or the answer says
			// nothing of the key's outcome.
			t.uncertainSeqs = []int{0}
		}
		out[i] = t
	}
	return out
}

// sleepUntil waits until t, or returns false when ctx ends first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}
