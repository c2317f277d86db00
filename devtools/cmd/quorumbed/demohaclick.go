package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/devtools/audit"
)

// haTrace is what the client of one click saw, following its request to a
// final answer as a client would: every answer, in order.
type haTrace struct {
	proc    *ordersdProc
	key     string // the Idempotency-Key
	answers []demoResult
	at      time.Time     // when the final answer came
	slowest time.Duration // the longest an answer took
	err     error         // a hang, a 503 without Retry-After, no final answer in time
}

// final is the trace's last answer.
func (t haTrace) final() demoResult { return t.answers[len(t.answers)-1] }

// String is the trace on one line: the answers that were not final, runs
// of the same one counted, then the final answer with its body.
func (t haTrace) String() string {
	var parts []string
	for i := 0; i < len(t.answers)-1; {
		r, j := t.answers[i], i
		for j < len(t.answers)-1 && t.answers[j].status == r.status && t.answers[j].retryAfter == r.retryAfter {
			j++
		}
		part := strconv.Itoa(r.status)
		if r.retryAfter != "" {
			part += " (Retry-After: " + r.retryAfter + ")"
		}
		if j-i > 1 {
			part += fmt.Sprintf(" x%d", j-i)
		}
		parts, i = append(parts, part), j
	}
	if len(t.answers) > 0 {
		f := t.final()
		parts = append(parts, fmt.Sprintf("%d replayed=%-5v %s", f.status, f.replayed, f.body))
	}
	return strings.Join(parts, ", then ")
}

// clicks sends the same request, with key, to every instance at once, and
// follows each to a final answer until deadline.
func (s *haStory) clicks(ctx context.Context, key string, deadline time.Time) []haTrace {
	traces := make([]haTrace, len(s.procs))
	var wg sync.WaitGroup
	for i, p := range s.procs {
		wg.Go(func() { traces[i] = s.follow(ctx, p, key, deadline) })
	}
	wg.Wait()
	return traces
}

// follow sends the click with key to p until a final answer: after a 202
// (in progress) or a 503 it waits what Retry-After says and sends it
// again. Each attempt has haAttemptTimeout to be answered; no answer in
// that time is a hang, and a 503 without Retry-After, or no final answer
// by deadline, a failure.
func (s *haStory) follow(ctx context.Context, p *ordersdProc, key string, deadline time.Time) haTrace {
	t := haTrace{proc: p, key: key}
	for {
		actx, cancel := context.WithTimeout(ctx, haAttemptTimeout)
		sent := time.Now()
		r := postOrder(actx, p.url, s.token, key, haBody)
		cancel()
		t.slowest = max(t.slowest, time.Since(sent))
		if r.err != nil {
			t.err = fmt.Errorf("%s: no answer %v after a POST /orders was sent (a hang): %w", p.name, time.Since(sent).Round(time.Millisecond), r.err)
			return t
		}
		t.answers = append(t.answers, r)
		if r.status != http.StatusAccepted && r.status != http.StatusServiceUnavailable {
			t.at = time.Now()
			return t
		}
		wait, err := retryWait(r)
		if err == nil && time.Now().Add(wait).After(deadline) {
			err = fmt.Errorf("no final answer by the deadline (last: %d %s)", r.status, r.body)
		}
		if err == nil {
			err = sleepCtx(ctx, wait)
		}
		if err != nil {
			t.err = fmt.Errorf("%s: %w", p.name, err)
			return t
		}
	}
}

// retryWait is how long a client waits before it sends r's request again:
// its Retry-After. A 503 must carry one; a 202 without one is polled
// every 200 ms.
func retryWait(r demoResult) (time.Duration, error) {
	if r.retryAfter == "" {
		if r.status == http.StatusServiceUnavailable {
			return 0, fmt.Errorf("503 without Retry-After: %s", r.body)
		}
		return 200 * time.Millisecond, nil
	}
	n, err := strconv.Atoi(r.retryAfter)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("Retry-After %q is not a number of seconds", r.retryAfter)
	}
	return max(time.Duration(n)*time.Second, 100*time.Millisecond), nil
}

// sleepCtx waits d, or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// report prints each click's trace, the body of each kind of 503 and
// a count of the answers, keeps the final answers for the audit, and
// returns the clicks' failures.
func (s *haStory) report(traces []haTrace) error {
	var errs []error
	var unavailable []string // the distinct bodies of the 503s
	var answers, unavail int
	var slowest time.Duration
	for i, t := range traces {
		if t.err != nil {
			errs = append(errs, t.err)
		}
		fmt.Fprintf(s.out, "  %s -> %s\n", s.procs[i].name, t)
		for _, r := range t.answers {
			if r.status == http.StatusServiceUnavailable {
				unavail++
				if body := strings.TrimSpace(r.body); !slices.Contains(unavailable, body) {
					unavailable = append(unavailable, body)
				}
			}
		}
		answers, slowest = answers+len(t.answers), max(slowest, t.slowest)
		if t.err == nil {
			f := t.final()
			s.resps = append(s.resps, audit.Response{UserID: "u1001", IdempotencyKey: t.key, Status: f.status, Body: f.body, OrderID: f.orderID})
		}
	}
	for _, body := range unavailable {
		fmt.Fprintf(s.out, "  what a 503 said: %s\n", body)
	}
	if len(errs) == 0 {
		with := ""
		if unavail > 0 {
			with = fmt.Sprintf(", %d of them 503, each with a Retry-After", unavail)
		}
		fmt.Fprintf(s.out, "  %d answers%s; the slowest took %v: no request hung\n", answers, with, slowest.Round(time.Millisecond))
	}
	return errors.Join(errs...)
}
