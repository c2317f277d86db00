package payment

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/internal/option"
	"github.com/quorumlock/quorumlock/internal/wait"
)

// HTTPProvider defaults.
const (
	// DefaultAttemptTimeout bounds one HTTP attempt of an [HTTPProvider].
	DefaultAttemptTimeout = 5 * time.Second
	// DefaultRetries is how many times an [HTTPProvider] retries a call
	// whose outcome is unknown.
	DefaultRetries = 3
	// DefaultRetryBackoff is the wait before the first retry; it doubles
	// with each retry, up to [MaxRetryBackoff], and is jittered.
	DefaultRetryBackoff = 100 * time.Millisecond
	// MaxRetryBackoff caps the wait between retries.
	MaxRetryBackoff = 5 * time.Second

	maxHTTPRetries  = 20
	maxReplyBytes   = 1 << 20
	maxRequestIDLen = 255
)

// HTTPProvider is a [Provider] that talks to a payment service over HTTP
// with the wire protocol of package fakepay:
//
//	POST /charges           Idempotency-Key: <PaymentRequestID>
//	                        {"order_id", "amount_cents"} -> 200 {"status", "provider_ref", ...}
//	GET  /charges/{id}      -> 200 the charge, or 404
//
// A call whose outcome is unknown (a transport error, an attempt that
// timed out, a connection closed without an answer, 429 or 5xx) is retried
// with the same Idempotency-Key, which is safe because the service charges
// a key at most once; when the retries are used up it fails with an error
// matching [ErrTimeout]. A charge answered 400 or 422 (its content
// refused, or its key known with other content) fails with an error
// matching [ErrRejected]; any other 4xx but 429 with an error matching
// [ErrInvalid] alone (the call, not the charge, was refused); neither is
// retried. It is safe for concurrent use.
type HTTPProvider struct {
	base *url.URL
	httpConfig
}

// HTTPOption configures [NewHTTPProvider]. A nil option is an error
// wrapping [ErrInvalid].
type HTTPOption func(*httpConfig) error

// httpConfig is what the options of an HTTPProvider set.
type httpConfig struct {
	client         *http.Client
	attemptTimeout time.Duration
	retries        int
	backoff        time.Duration
}

// WithHTTPClient sets the HTTP client (default: one on
// http.DefaultTransport that does not follow redirects). Bound calls with
// [WithAttemptTimeout] and the context rather than the client's Timeout.
func WithHTTPClient(c *http.Client) HTTPOption {
	return func(hc *httpConfig) error {
		if c == nil {
			return fmt.Errorf("%w: nil HTTP client", ErrInvalid)
		}
		hc.client = c
		return nil
	}
}

// WithAttemptTimeout bounds each HTTP attempt, reading the answer
// included (default [DefaultAttemptTimeout]). An attempt that runs out of
// time has an unknown outcome and is retried.
func WithAttemptTimeout(d time.Duration) HTTPOption {
	return func(c *httpConfig) error {
		if d <= 0 {
			return fmt.Errorf("%w: attempt timeout %v", ErrInvalid, d)
		}
		c.attemptTimeout = d
		return nil
	}
}

// WithRetries sets how many times a call with an unknown outcome is
// retried (0..20, default [DefaultRetries]) and the wait before the first
// retry (default [DefaultRetryBackoff]), which doubles with each retry up
// to [MaxRetryBackoff] and is jittered. No retry starts when the context
// would end before it.
func WithRetries(n int, base time.Duration) HTTPOption {
	return func(c *httpConfig) error {
		if n < 0 || n > maxHTTPRetries {
			return fmt.Errorf("%w: %d retries, want 0..%d", ErrInvalid, n, maxHTTPRetries)
		}
		if base <= 0 {
			return fmt.Errorf("%w: retry backoff %v", ErrInvalid, base)
		}
		c.retries, c.backoff = n, base
		return nil
	}
}

// NewHTTPProvider returns a provider for the service at baseURL, an
// absolute http or https URL without query or fragment; the API paths are
// appended to its path. An invalid or nil option is an error wrapping
// [ErrInvalid].
func NewHTTPProvider(baseURL string, opts ...HTTPOption) (*HTTPProvider, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("%w: provider URL: %w", ErrInvalid, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return nil, fmt.Errorf("%w: provider URL %q: want an absolute http or https URL", ErrInvalid, u.Redacted())
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return nil, fmt.Errorf("%w: provider URL %q: no query or fragment allowed", ErrInvalid, u.Redacted())
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = strings.TrimRight(u.RawPath, "/")
	c := httpConfig{
		client: &http.Client{
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		attemptTimeout: DefaultAttemptTimeout,
		retries:        DefaultRetries,
		backoff:        DefaultRetryBackoff,
	}
	if err := option.Apply(&c, opts, ErrInvalid); err != nil {
		return nil, err
	}
	return &HTTPProvider{base: u, httpConfig: c}, nil
}

// httpCharge is the wire form of a charge.
type httpCharge struct {
	PaymentRequestID string `json:"payment_request_id"`
	OrderID          string `json:"order_id,omitempty"`
	AmountCents      int64  `json:"amount_cents,omitempty"`
	Status           Status `json:"status"`
	ProviderRef      string `json:"provider_ref"`
}

// httpProblem is the part of a problem answer worth reporting.
type httpProblem struct {
	Code   string `json:"code"`
	Title  string `json:"title"`
	Detail string `json:"detail"`
}

// Charge implements [Provider]: it POSTs the charge with
// Idempotency-Key: req.PaymentRequestID. A decline is StatusFailed with a
// nil error.
func (p *HTTPProvider) Charge(ctx context.Context, req ChargeRequest) (Result, error) {
	switch {
	case !validRequestID(req.PaymentRequestID):
		return Result{}, Reject(fmt.Sprintf("payment request id %q is not 1 to %d visible ASCII characters", req.PaymentRequestID, maxRequestIDLen))
	case req.OrderID == "":
		return Result{}, Reject("no order id")
	case req.AmountCents <= 0:
		return Result{}, Reject(fmt.Sprintf("amount %d cents: a charge must be positive", req.AmountCents))
	}
	body, err := json.Marshal(struct {
		OrderID     string `json:"order_id"`
		AmountCents int64  `json:"amount_cents"`
	}{req.OrderID, req.AmountCents})
	if err != nil {
		return Result{}, fmt.Errorf("%w: charge request: %w", ErrInvalid, err)
	}
	what := "charge " + req.PaymentRequestID
	status, reply, err := p.call(ctx, what, http.MethodPost, p.endpoint("charges"), req.PaymentRequestID, body)
	if err != nil {
		return Result{}, err
	}
	if status == http.StatusBadRequest || status == http.StatusUnprocessableEntity {
		// The charge itself was refused: its content is invalid, or its
		// key is the provider's for another charge. No money moved.
		return Result{}, Reject(fmt.Sprintf("%d %s", status, problemText(reply)))
	}
	return p.result(what, status, reply, req.PaymentRequestID)
}

// Query implements [Provider]: it GETs the charge, and maps 404 to
// StatusNotFound.
func (p *HTTPProvider) Query(ctx context.Context, paymentRequestID string) (Result, error) {
	if !validRequestID(paymentRequestID) {
		return Result{}, fmt.Errorf("%w: payment request id %q", ErrInvalid, paymentRequestID)
	}
	what := "query " + paymentRequestID
	status, reply, err := p.call(ctx, what, http.MethodGet, p.endpoint("charges", paymentRequestID), "", nil)
	if err != nil {
		return Result{}, err
	}
	if status == http.StatusNotFound {
		return Result{Status: StatusNotFound}, nil
	}
	return p.result(what, status, reply, paymentRequestID)
}

// result reads a final answer: 200 with a charge, or a 4xx problem.
func (p *HTTPProvider) result(what string, status int, reply []byte, id string) (Result, error) {
	if status >= 400 && status < 500 {
		return Result{}, fmt.Errorf("%w: http provider: %s: %d %s", ErrInvalid, what, status, problemText(reply))
	}
	if status != http.StatusOK {
		return Result{}, fmt.Errorf("http provider: %s: unexpected status %d: %w", what, status, ErrTimeout)
	}
	var c httpCharge
	if err := json.Unmarshal(reply, &c); err != nil {
		return Result{}, fmt.Errorf("http provider: %s: unreadable answer: %w (%w)", what, ErrTimeout, err)
	}
	switch {
	case c.PaymentRequestID != id:
		return Result{}, fmt.Errorf("http provider: %s: answer is about %q: %w", what, c.PaymentRequestID, ErrTimeout)
	case c.Status != StatusSucceeded && c.Status != StatusFailed && c.Status != StatusPending:
		return Result{}, fmt.Errorf("http provider: %s: unknown status %q: %w", what, c.Status, ErrTimeout)
	}
	return Result{Status: c.Status, ProviderRef: c.ProviderRef}, nil
}

// problemText is the code and detail of a problem answer, bounded.
func problemText(reply []byte) string {
	var pr httpProblem
	_ = json.Unmarshal(reply, &pr)
	t := strings.TrimSpace(pr.Code + ": " + pr.Detail)
	if len(t) > 300 {
		t = strings.ToValidUTF8(t[:300], "") + "..."
	}
	return t
}

// call sends the request, retrying unknown outcomes, and returns the last
// answer that is not retried. Its errors match ErrTimeout.
func (p *HTTPProvider) call(ctx context.Context, what, method, target, key string, body []byte) (int, []byte, error) {
	var last error
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			if last == nil {
				last = err
			}
			return 0, nil, fmt.Errorf("http provider: %s: %w (%w)", what, ErrTimeout, last)
		}
		status, reply, err := p.once(ctx, method, target, key, body)
		switch {
		case err != nil:
			last = err
		case status == http.StatusTooManyRequests || status >= 500:
			last = fmt.Errorf("status %d", status)
		default:
			return status, reply, nil
		}
		if attempt >= p.retries {
			return 0, nil, fmt.Errorf("http provider: %s: %w (after %d attempts: %w)", what, ErrTimeout, attempt+1, last)
		}
		pause := p.retryWait(attempt)
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) <= pause {
			return 0, nil, fmt.Errorf("http provider: %s: %w (after %d attempts, no time left to retry: %w)", what, ErrTimeout, attempt+1, last)
		}
		if err := wait.Sleep(ctx, pause); err != nil {
			return 0, nil, fmt.Errorf("http provider: %s: %w (%w, after %d attempts: %w)", what, ErrTimeout, err, attempt+1, last)
		}
	}
}

// once makes one attempt, bounded by the attempt timeout, and reads the
// whole answer.
func (p *HTTPProvider) once(ctx context.Context, method, target, key string, body []byte) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, p.attemptTimeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	reply, err := io.ReadAll(io.LimitReader(resp.Body, maxReplyBytes))
	if err != nil {
		return 0, nil, fmt.Errorf("read the answer: %w", err)
	}
	return resp.StatusCode, reply, nil
}

// retryWait is the jittered wait before retry n+1: between half and all
// of backoff·2^n, capped at MaxRetryBackoff.
func (p *HTTPProvider) retryWait(n int) time.Duration {
	d := p.backoff
	for i := 0; i < n && d < MaxRetryBackoff; i++ {
		d *= 2
	}
	d = min(d, MaxRetryBackoff)
	return d/2 + rand.N(d/2+1)
}

// endpoint returns the URL of the base path followed by the segments,
// each escaped as one path segment.
func (p *HTTPProvider) endpoint(segments ...string) string {
	u := *p.base
	var raw strings.Builder
	raw.WriteString(p.base.EscapedPath())
	path := p.base.Path
	for _, s := range segments {
		path += "/" + s
		raw.WriteString("/")
		raw.WriteString(escapeSegment(s))
	}
	u.Path, u.RawPath = path, raw.String()
	return u.String()
}

// escapeSegment escapes s as one path segment; "." and ".." too, which
// would otherwise be taken as the current or parent directory.
func escapeSegment(s string) string {
	switch s {
	case ".":
		return "%2E"
	case "..":
		return "%2E%2E"
	}
	return url.PathEscape(s)
}

// validRequestID reports whether id can be sent as an Idempotency-Key:
// 1..255 visible ASCII characters.
func validRequestID(id string) bool {
	if len(id) == 0 || len(id) > maxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return false
		}
	}
	return true
}
