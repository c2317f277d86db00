package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/orders"
	"github.com/quorumlock/quorumlock/orders/problem"
)

// maxAnswerBytes bounds how much of an answer a client reads.
const maxAnswerBytes = 64 << 10

// transportError is the answer key of a request that got no HTTP answer.
const transportError = "transport error"

// user is one simulated client: a user id with its bearer token, ordering
// one unit of one product.
type user struct {
	id            string
	authorization string // "Bearer <token>"
	product       string
	body          []byte
}

// orderBody is the POST /orders payload of one unit of product.
func orderBody(product string) ([]byte, error) {
	b, err := json.Marshal(map[string]any{"productId": product, "quantity": 1, "addressVersion": "v1", "couponId": nil})
	if err != nil {
		return nil, fmt.Errorf("order body: %w", err)
	}
	return b, nil
}

// idempotencyKey is the key of a user's n-th request; every request gets
// a fresh one. seqOf reads n back.
func idempotencyKey(n int) string { return "k" + strconv.Itoa(n) }

// seqOf returns the n of idempotencyKey(n), or false for any other key.
func seqOf(key string) (int, bool) {
	if len(key) < 2 || key[0] != 'k' {
		return 0, false
	}
	n, err := strconv.Atoi(key[1:])
	return n, err == nil && n >= 0 && idempotencyKey(n) == key
}

// tally is what one client saw in one run.
type tally struct {
	// inWindow counts answers to requests sent and answered within the
	// measured window, by answer key; latencies are those of its 201s.
	inWindow  map[string]int
	created   int
	latencies []time.Duration
	// createdSeqs are the request numbers of every 201 answer of the run
	// (warm-up and requests that ended after the window included), in
	// order; uncertainSeqs those of requests whose outcome the client
	// could not learn (no answer, or a 503 outcome_unknown).
	createdSeqs, uncertainSeqs []int
	sent                       int
	firstError                 string
}

// window is the measured part of a run.
type window struct {
	start, end time.Time
}

// contains reports whether a request sent at t0 and answered at t1 is
// measured.
func (w window) contains(t0, t1 time.Time) bool { return !t0.Before(w.start) && !t1.After(w.end) }

// drive runs every user's loop for the warm-up and the window. The loops
// start no request once the window ends (runCtx's deadline) or ctx ends;
// drive returns when the last request in flight has been answered.
func (b *bench) drive(ctx context.Context, users []user, ins []*instance) ([]*tally, window) {
	start := time.Now()
	w := window{start: start.Add(b.cfg.warmup)}
	w.end = w.start.Add(b.cfg.duration)
	runCtx, cancel := context.WithDeadline(ctx, w.end)
	defer cancel()
	tallies := make([]*tally, len(users))
	var wg sync.WaitGroup
	for i, u := range users {
		t := &tally{inWindow: map[string]int{}}
		tallies[i] = t
		wg.Go(func() { b.loop(ctx, runCtx, u, i, ins, w, t) })
	}
	wg.Wait()
	return tallies, w
}

// loop is one user's requests, round-robin over ins from instance first.
// Requests run under ctx, not runCtx, so that the end of the window never
// cuts one short: a cut request's outcome would be unknown.
func (b *bench) loop(ctx, runCtx context.Context, u user, first int, ins []*instance, w window, t *tally) {
	for n := 0; runCtx.Err() == nil; n++ {
		in := ins[(first+n)%len(ins)]
		t0 := time.Now()
		key, err := b.post(ctx, in.srv.URL, u, idempotencyKey(n))
		t1 := time.Now()
		t.sent++
		switch {
		case err != nil:
			key = transportError
			t.uncertainSeqs = append(t.uncertainSeqs, n)
			if t.firstError == "" {
				t.firstError = err.Error()
			}
		case key == answerCreated:
			t.createdSeqs = append(t.createdSeqs, n)
		case key == answerOutcomeUnknown:
			t.uncertainSeqs = append(t.uncertainSeqs, n)
		}
		if !w.contains(t0, t1) {
			continue
		}
		t.inWindow[key]++
		if key == answerCreated {
			t.created++
			t.latencies = append(t.latencies, t1.Sub(t0))
		}
	}
}

// Answer keys the loop tells apart.
var (
	answerCreated        = strconv.Itoa(http.StatusCreated)
	answerOutcomeUnknown = strconv.Itoa(http.StatusServiceUnavailable) + " " + problem.CodeOutcomeUnknown
)

// post sends one POST /orders of u with the idempotency key key to the
// instance at base, within -request-timeout, and returns the answer's key:
// its status, followed for a problem document by its code ("503
// service_unavailable"). An error means no answer.
func (b *bench) post(ctx context.Context, base string, u user, key string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/orders", bytes.NewReader(u.body))
	if err != nil {
		return "", fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Authorization", u.authorization)
	req.Header.Set(orders.HeaderIdempotencyKey, key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return "", fmt.Errorf("read the %d answer: %w", resp.StatusCode, err)
	}
	return answerKey(resp.StatusCode, body), nil
}

// answerKey names an answer: its status, and for an error with a problem
// document the document's code.
func answerKey(status int, body []byte) string {
	k := strconv.Itoa(status)
	if status < 400 {
		return k
	}
	var p struct {
		Code string `json:"code"`
	}
	if json.Unmarshal(body, &p) == nil && p.Code != "" {
		return k + " " + p.Code
	}
	return k
}
