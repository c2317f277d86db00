package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/orders"
)

// maxAnswerBytes bounds how much of an answer a client reads.
const maxAnswerBytes = 64 << 10

// loader sends the clients' requests over one HTTP transport.
type loader struct {
	urls    []string
	timeout time.Duration
	client  *http.Client
}

// newLoader returns a loader for c, with room for an idle connection per
// client to every instance. The transport ignores proxy variables: the
// requests go straight to the loopback instances.
func newLoader(c config) *loader {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: c.timeout}).DialContext,
		MaxIdleConns:        c.distinct + c.popular,
		MaxIdleConnsPerHost: c.distinct + c.popular,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
	return &loader{urls: c.urls, timeout: c.timeout, client: &http.Client{Transport: tr}}
}

// close closes the idle connections.
func (l *loader) close() { l.client.CloseIdleConnections() }

// drive runs every client of sides in a closed loop until w ends (or ctx
// does), and returns when the last request in flight has its answer or
// its timeout: a tally per client, per side.
func (l *loader) drive(ctx context.Context, sides []side, w window) [][]*tally {
	stop, cancel := context.WithDeadline(ctx, w.end)
	defer cancel()
	out := make([][]*tally, len(sides))
	var wg sync.WaitGroup
	first := 0
	for si, s := range sides {
		out[si] = make([]*tally, len(s.users))
		for ui, u := range s.users {
			t := &tally{}
			out[si][ui] = t
			f := first
			wg.Go(func() { l.loop(ctx, stop, u, f, w, t) })
			first++
		}
	}
	wg.Wait()
	return out
}

// loop is one client: request after request, each with a fresh key,
// round-robin over the instances from the first-th, until stop ends.
// Requests run under ctx, bounded by the timeout each, so the end of the
// window cuts none short.
func (l *loader) loop(ctx, stop context.Context, u user, first int, w window, t *tally) {
	for n := 0; stop.Err() == nil; n++ {
		base := l.urls[(first+n)%len(l.urls)]
		t0 := time.Now()
		a, err := l.post(ctx, base, u, idempotencyKey(n))
		t1 := time.Now()
		if err != nil && t.firstError == "" {
			t.firstError = err.Error()
		}
		t.record(n, a, w.contains(t0, t1), t1.Sub(t0))
	}
}

// post sends one POST /orders of u with key to the instance at base and
// waits at most the timeout for its answer. The error, when there is one,
// says why the request got no answer.
func (l *loader) post(ctx context.Context, base string, u user, key string) (answer, error) {
	rctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, base+"/orders", bytes.NewReader(u.body))
	if err != nil {
		return answer{kind: kindOther, label: "bad request"}, err // never sent
	}
	req.Header.Set("Authorization", u.authorization)
	req.Header.Set(orders.HeaderIdempotencyKey, key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.client.Do(req)
	if err != nil {
		return noAnswer(errors.Is(rctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil, ctx.Err() != nil), err
	}
	defer resp.Body.Close()
	// The status decides; a body cut short only loses the problem code.
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	return classify(resp.StatusCode, problemCode(resp.StatusCode, body), resp.Header.Get("Retry-After") != ""), nil
}
