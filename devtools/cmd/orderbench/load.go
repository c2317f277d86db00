package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime/pprof"
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
// one unit of one product, or (cart) a new cart for every request.
type user struct {
	id            string
	authorization string // "Bearer <token>"
	product       string // "" for a cart user
	body          []byte
	// cart draws a cart user's carts, one per request, in place of body.
	cart *cartDeck
}

// products returns the products the user orders.
func (u user) products() []string {
	if u.cart != nil {
		return u.cart.products
	}
	return []string{u.product}
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
	// carts holds a cart user's carts, by request number: the products
	// of each, sorted and joined by ",".
	carts      []string
	sent       int
	firstError string
}

// window is the measured part of a load.
type window struct {
	start, end time.Time
}

// liveWindow is the measured part of a load as its loops see it while
// they run: it starts at start and ends at end, which an open window
// learns only when it is closed.
type liveWindow struct {
	start time.Time
	mu    sync.Mutex
	end   time.Time // zero while open
}

// fixedWindow returns the window of length d from start.
func fixedWindow(start time.Time, d time.Duration) *liveWindow {
	return &liveWindow{start: start, end: start.Add(d)}
}

// openWindow returns a window from start whose end close decides.
func openWindow(start time.Time) *liveWindow { return &liveWindow{start: start} }

// contains reports whether a request sent at t0 and answered at t1 is
// measured. t1 must be read before the call: then a request answered
// before an open window's close is inside, whichever takes the lock first.
func (w *liveWindow) contains(t0, t1 time.Time) bool {
	if t0.Before(w.start) {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.end.IsZero() || !t1.After(w.end)
}

// state reports whether the window has started and whether it has ended
// at now.
func (w *liveWindow) state(now time.Time) (started, ended bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !now.Before(w.start), !w.end.IsZero() && now.After(w.end)
}

// close ends an open window now (a fixed one keeps its end) and returns
// it.
func (w *liveWindow) close() window {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.end.IsZero() {
		w.end = time.Now()
	}
	return window{start: w.start, end: w.end}
}

// drive runs every user's loop: they start no request once stop ends, and
// drive returns when the last request in flight has been answered. w says
// which requests are measured.
func (b *bench) drive(ctx, stop context.Context, users []user, ins []*instance, w *liveWindow) []*tally {
	tallies := make([]*tally, len(users))
	var wg sync.WaitGroup
	// The loops, and the HTTP client's goroutines they start, carry the
	// clients' label, for -cpu-split.
	pprof.Do(ctx, roleLabels(roleClients), func(context.Context) {
		for i, u := range users {
			t := &tally{inWindow: map[string]int{}}
			tallies[i] = t
			wg.Go(func() { b.loop(ctx, stop, u, i, ins, w, t) })
		}
	})
	wg.Wait()
	return tallies
}

// loop is one user's requests, round-robin over ins from instance first.
// Requests run under ctx, not stop, so that the end of the load never
// cuts one short: a cut request's outcome would be unknown.
func (b *bench) loop(ctx, stop context.Context, u user, first int, ins []*instance, w *liveWindow, t *tally) {
	for n := 0; stop.Err() == nil; n++ {
		in := ins[(first+n)%len(ins)]
		req := u
		if u.cart != nil {
			var products string
			req.body, products = u.cart.next()
			t.carts = append(t.carts, products)
		}
		t0 := time.Now()
		rep, err := b.post(ctx, in.srv.URL, req, idempotencyKey(n))
		t1 := time.Now()
		key := rep.key
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

// reply is what one request was answered: its key (see answerKey) and
// its Retry-After, or -1 without a valid one.
type reply struct {
	key        string
	retryAfter time.Duration
}

// post sends one POST /orders of u with the idempotency key key to the
// instance at base, within -request-timeout, and returns the answer. An
// error means no answer.
func (b *bench) post(ctx context.Context, base string, u user, key string) (reply, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/orders", bytes.NewReader(u.body))
	if err != nil {
		return reply{}, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Authorization", u.authorization)
	req.Header.Set(orders.HeaderIdempotencyKey, key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return reply{}, fmt.Errorf("read the %d answer: %w", resp.StatusCode, err)
	}
	return reply{key: answerKey(resp.StatusCode, body), retryAfter: retryAfter(resp.Header.Get("Retry-After"), time.Now())}, nil
}

// maxRetryAfterSecs bounds a Retry-After read, so no value overflows.
const maxRetryAfterSecs = 24 * 3600

// retryAfter reads a Retry-After value, delay-seconds or an HTTP date
// (from now), or returns -1 for none or an invalid one.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return -1
	}
	if n, err := strconv.Atoi(v); err == nil {
		if n < 0 {
			return -1
		}
		return time.Duration(min(n, maxRetryAfterSecs)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return -1
}

// answerKey names an answer: its status, and for an error with a problem
// document the document's code ("503 service_unavailable").
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
