package main

import (
	"context"
	"io"
	"net/http"
	"strings"
)

// send makes a request without a body to url with the bearer token, and
// returns its answer.
func send(ctx context.Context, method, url, token string) demoResult {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return demoResult{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return demoResult{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return demoResult{status: resp.StatusCode, body: string(b), err: err}
}

// demoResult is one answer of ordersd, or the error that stood in for it.
type demoResult struct {
	status     int
	replayed   bool
	retryAfter string // the Retry-After header, empty when absent
	body       string
	orderID    string
	err        error
}

// postOrder posts body to url's /orders with the bearer token and the
// idempotency key, and returns the answer with the order id it names.
func postOrder(ctx context.Context, url, token, key, body string) demoResult {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/orders", strings.NewReader(body))
	if err != nil {
		return demoResult{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return demoResult{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	r := demoResult{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true",
		retryAfter: resp.Header.Get("Retry-After"), body: string(b), err: err}
	if i := strings.Index(r.body, `"orderId":"`); i >= 0 {
		rest := r.body[i+len(`"orderId":"`):]
		r.orderID, _, _ = strings.Cut(rest, `"`)
	}
	return r
}
