package payment_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/devtools/fakepay"
	"github.com/quorumlock/quorumlock/orders/payment"
)

// httpBed is a fakepay server behind httptest, with a middleware that can
// answer in its place and counts the requests that reach it.
type httpBed struct {
	fp  *fakepay.Server
	url string

	mu       sync.Mutex
	requests int
	// intercept, when set, answers the n-th request (from 1) itself by
	// returning true.
	intercept func(n int, w http.ResponseWriter, r *http.Request) bool
}

func newHTTPBed(t *testing.T) *httpBed {
	t.Helper()
	fp, err := fakepay.New()
	if err != nil {
		t.Fatal(err)
	}
	b := &httpBed{fp: fp}
	h := fp.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.requests++
		n, intercept := b.requests, b.intercept
		b.mu.Unlock()
		if intercept != nil && intercept(n, w, r) {
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		ts.Close()
		if err := fp.Close(); err != nil {
			t.Error(err)
		}
	})
	b.url = ts.URL
	return b
}

func (b *httpBed) setIntercept(f func(n int, w http.ResponseWriter, r *http.Request) bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.intercept = f
}

func (b *httpBed) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.requests
}

// provider returns an HTTPProvider for the bed with fast retries.
func (b *httpBed) provider(t *testing.T, opts ...payment.HTTPOption) *payment.HTTPProvider {
	t.Helper()
	opts = append([]payment.HTTPOption{payment.WithRetries(3, time.Millisecond)}, opts...)
	p, err := payment.NewHTTPProvider(b.url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// freshConns is a client that opens a new connection for every request,
// so that the transport never replays a request by itself and each
// attempt is seen by the server.
func freshConns(t *testing.T) payment.HTTPOption {
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return payment.WithHTTPClient(&http.Client{Transport: tr})
}

// hang is an intercept that never answers: it waits for the client to go
// away or the test to end.
func hang(t *testing.T) func(int, http.ResponseWriter, *http.Request) bool {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // before the server closes
	return func(_ int, _ http.ResponseWriter, r *http.Request) bool {
		select {
		case <-r.Context().Done():
		case <-release:
		}
		return true
	}
}

var httpReq = payment.ChargeRequest{PaymentRequestID: payment.RequestID("o1"), OrderID: "o1", AmountCents: 1999}

func TestHTTPProviderChargeAndReplay(t *testing.T) {
	b := newHTTPBed(t)
	p := b.provider(t)
	ctx := context.Background()
	res, err := p.Charge(ctx, httpReq)
	if err != nil || res != (payment.Result{Status: payment.StatusSucceeded, ProviderRef: "ch_1"}) {
		t.Fatalf("charge: %+v %v", res, err)
	}
	res, err = p.Charge(ctx, httpReq)
	if err != nil || res != (payment.Result{Status: payment.StatusSucceeded, ProviderRef: "ch_1"}) {
		t.Fatalf("replay: %+v %v", res, err)
	}
	if st := b.fp.Stats(); st.Charges != 1 || st.Requests != 2 {
		t.Fatalf("stats %+v", st)
	}
	if res, err := p.Query(ctx, httpReq.PaymentRequestID); err != nil || res.Status != payment.StatusSucceeded || res.ProviderRef != "ch_1" {
		t.Fatalf("query: %+v %v", res, err)
	}
	if res, err := p.Query(ctx, "o2:pay"); err != nil || res.Status != payment.StatusNotFound {
		t.Fatalf("query unknown: %+v %v", res, err)
	}
	// The same key with another amount is the caller's bug: ErrInvalid,
	// not retried.
	n := b.count()
	other := httpReq
	other.AmountCents++
	if _, err := p.Charge(ctx, other); !errors.Is(err, payment.ErrInvalid) || errors.Is(err, payment.ErrTimeout) {
		t.Fatalf("mismatch: %v", err)
	}
	if b.count() != n+1 {
		t.Fatalf("a 422 was retried: %d requests", b.count()-n)
	}
}

func TestHTTPProviderAwkwardIDs(t *testing.T) {
	b := newHTTPBed(t)
	p := b.provider(t)
	for _, id := range []string{"a/b:pay", "..", ".", "x?y#z%41:pay", "a//b"} {
		req := payment.ChargeRequest{PaymentRequestID: id, OrderID: "o", AmountCents: 1}
		if res, err := p.Charge(context.Background(), req); err != nil || res.Status != payment.StatusSucceeded {
			t.Fatalf("%q: charge %+v %v", id, res, err)
		}
		if res, err := p.Query(context.Background(), id); err != nil || res.Status != payment.StatusSucceeded {
			t.Fatalf("%q: query %+v %v", id, res, err)
		}
	}
}

func TestHTTPProviderDecline(t *testing.T) {
	b := newHTTPBed(t)
	p := b.provider(t)
	if err := b.fp.Inject(httpReq.PaymentRequestID, fakepay.FaultDecline, 1); err != nil {
		t.Fatal(err)
	}
	res, err := p.Charge(context.Background(), httpReq)
	if err != nil || res.Status != payment.StatusFailed {
		t.Fatalf("decline: %+v %v", res, err)
	}
	if st := b.fp.Stats(); st.Charges != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// The charge happens but the reply is lost: the outcome is unknown, Query
// finds the charge, and charging again with the same key moves no money.
func TestHTTPProviderLoseReply(t *testing.T) {
	b := newHTTPBed(t)
	p := b.provider(t, payment.WithRetries(0, time.Millisecond), freshConns(t))
	if err := b.fp.Inject(httpReq.PaymentRequestID, fakepay.FaultLoseReply, 1); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if res, err := p.Charge(ctx, httpReq); !errors.Is(err, payment.ErrTimeout) {
		t.Fatalf("lost reply: %+v %v", res, err)
	}
	if res, err := p.Query(ctx, httpReq.PaymentRequestID); err != nil || res.Status != payment.StatusSucceeded {
		t.Fatalf("query: %+v %v", res, err)
	}
	if res, err := p.Charge(ctx, httpReq); err != nil || res.Status != payment.StatusSucceeded {
		t.Fatalf("charge again: %+v %v", res, err)
	}
	if st := b.fp.Stats(); st.Charges != 1 || st.Requests != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// With retries, a lost reply is retried with the same key and the caller
// gets the answer; still one charge.
func TestHTTPProviderRetriesALostReply(t *testing.T) {
	b := newHTTPBed(t)
	p := b.provider(t, freshConns(t))
	if err := b.fp.Inject(fakepay.AnyKey, fakepay.FaultLoseReply, 2); err != nil {
		t.Fatal(err)
	}
	res, err := p.Charge(context.Background(), httpReq)
	if err != nil || res.Status != payment.StatusSucceeded {
		t.Fatalf("charge: %+v %v", res, err)
	}
	if st := b.fp.Stats(); st.Charges != 1 || st.Requests != 3 {
		t.Fatalf("stats %+v", st)
	}
}

func TestHTTPProviderDrop(t *testing.T) {
	b := newHTTPBed(t)
	p := b.provider(t, payment.WithRetries(0, time.Millisecond), freshConns(t))
	if err := b.fp.Inject(httpReq.PaymentRequestID, fakepay.FaultDrop, 1); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if res, err := p.Charge(ctx, httpReq); !errors.Is(err, payment.ErrTimeout) {
		t.Fatalf("dropped: %+v %v", res, err)
	}
	if res, err := p.Query(ctx, httpReq.PaymentRequestID); err != nil || res.Status != payment.StatusNotFound {
		t.Fatalf("query: %+v %v", res, err)
	}
	if st := b.fp.Stats(); st.Charges != 0 || st.Requests != 0 {
		t.Fatalf("stats %+v", st)
	}
	// A retrying provider gets through.
	if err := b.fp.Inject(httpReq.PaymentRequestID, fakepay.FaultDrop, 1); err != nil {
		t.Fatal(err)
	}
	if res, err := b.provider(t, freshConns(t)).Charge(ctx, httpReq); err != nil || res.Status != payment.StatusSucceeded {
		t.Fatalf("retried: %+v %v", res, err)
	}
	if st := b.fp.Stats(); st.Charges != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestHTTPProviderPending(t *testing.T) {
	b := newHTTPBed(t)
	p := b.provider(t)
	if err := b.fp.Inject(fakepay.AnyKey, fakepay.FaultPending, 1); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if res, err := p.Charge(ctx, httpReq); err != nil || res.Status != payment.StatusPending {
		t.Fatalf("charge: %+v %v", res, err)
	}
	if res, err := p.Query(ctx, httpReq.PaymentRequestID); err != nil || res.Status != payment.StatusPending {
		t.Fatalf("query: %+v %v", res, err)
	}
	if _, err := b.fp.Complete(httpReq.PaymentRequestID, payment.StatusSucceeded); err != nil {
		t.Fatal(err)
	}
	if res, err := p.Query(ctx, httpReq.PaymentRequestID); err != nil || res.Status != payment.StatusSucceeded {
		t.Fatalf("query after completion: %+v %v", res, err)
	}
}

func TestHTTPProviderRetries5xxAnd429(t *testing.T) {
	b := newHTTPBed(t)
	b.setIntercept(func(n int, w http.ResponseWriter, _ *http.Request) bool {
		switch n {
		case 1:
			w.WriteHeader(http.StatusServiceUnavailable)
		case 2:
			w.WriteHeader(http.StatusTooManyRequests)
		case 3:
			w.WriteHeader(http.StatusInternalServerError)
		default:
			return false
		}
		return true
	})
	res, err := b.provider(t).Charge(context.Background(), httpReq)
	if err != nil || res.Status != payment.StatusSucceeded || b.count() != 4 {
		t.Fatalf("charge: %+v %v after %d requests", res, err, b.count())
	}

	// Always failing: retries+1 attempts, then outcome unknown.
	b.setIntercept(func(_ int, w http.ResponseWriter, _ *http.Request) bool {
		w.WriteHeader(http.StatusBadGateway)
		return true
	})
	before := b.count()
	_, err = b.provider(t, payment.WithRetries(2, time.Millisecond)).Query(context.Background(), httpReq.PaymentRequestID)
	if !errors.Is(err, payment.ErrTimeout) || b.count()-before != 3 {
		t.Fatalf("query: %v after %d requests", err, b.count()-before)
	}
}

// A 200 the provider cannot read leaves the outcome unknown.
func TestHTTPProviderUnreadableAnswer(t *testing.T) {
	b := newHTTPBed(t)
	for _, body := range []string{"not json", `{"payment_request_id":"o1:pay","status":"MAYBE"}`, `{"payment_request_id":"other","status":"SUCCEEDED"}`} {
		b.setIntercept(func(_ int, w http.ResponseWriter, _ *http.Request) bool {
			_, _ = w.Write([]byte(body))
			return true
		})
		if _, err := b.provider(t).Charge(context.Background(), httpReq); !errors.Is(err, payment.ErrTimeout) {
			t.Fatalf("%s: %v", body, err)
		}
	}
}

func TestHTTPProviderHonoursContext(t *testing.T) {
	b := newHTTPBed(t)
	b.setIntercept(hang(t))
	p := b.provider(t, payment.WithRetries(3, time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	began := time.Now()
	_, err := p.Charge(ctx, httpReq)
	if !errors.Is(err, payment.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("charge: %v", err)
	}
	if d := time.Since(began); d > 2*time.Second {
		t.Fatalf("returned after %v", d)
	}

	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := p.Query(ctx, httpReq.PaymentRequestID); !errors.Is(err, payment.ErrTimeout) || !errors.Is(err, context.Canceled) {
		t.Fatalf("query: %v", err)
	}
	// An ended context sends nothing.
	n := b.count()
	if _, err := p.Charge(ctx, httpReq); !errors.Is(err, payment.ErrTimeout) || b.count() != n {
		t.Fatalf("charge with an ended context: %v, %d requests", err, b.count()-n)
	}
}

// No retry starts when the context would end during its backoff.
func TestHTTPProviderDoesNotRetryPastTheContext(t *testing.T) {
	b := newHTTPBed(t)
	b.setIntercept(func(_ int, w http.ResponseWriter, _ *http.Request) bool {
		w.WriteHeader(http.StatusServiceUnavailable)
		return true
	})
	p := b.provider(t, payment.WithRetries(5, 2*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	_, err := p.Charge(ctx, httpReq)
	if !errors.Is(err, payment.ErrTimeout) || b.count() != 1 {
		t.Fatalf("charge: %v after %d requests", err, b.count())
	}
	if d := time.Since(began); d > 250*time.Millisecond {
		t.Fatalf("waited %v for a retry that could not finish in time", d)
	}
}

func TestHTTPProviderAttemptTimeout(t *testing.T) {
	b := newHTTPBed(t)
	b.setIntercept(hang(t))
	p := b.provider(t, payment.WithAttemptTimeout(50*time.Millisecond), payment.WithRetries(1, time.Millisecond))
	_, err := p.Charge(context.Background(), httpReq)
	if !errors.Is(err, payment.ErrTimeout) || b.count() != 2 {
		t.Fatalf("charge: %v after %d requests", err, b.count())
	}
}

func TestHTTPProviderBasePath(t *testing.T) {
	fp, err := fakepay.New()
	if err != nil {
		t.Fatal(err)
	}
	defer fp.Close()
	ts := httptest.NewServer(http.StripPrefix("/psp/v1", fp.Handler()))
	defer ts.Close()
	p, err := payment.NewHTTPProvider(ts.URL + "/psp/v1/")
	if err != nil {
		t.Fatal(err)
	}
	if res, err := p.Charge(context.Background(), httpReq); err != nil || res.Status != payment.StatusSucceeded {
		t.Fatalf("charge: %+v %v", res, err)
	}
	if res, err := p.Query(context.Background(), httpReq.PaymentRequestID); err != nil || res.Status != payment.StatusSucceeded {
		t.Fatalf("query: %+v %v", res, err)
	}
}

func TestHTTPProviderRejectsBadInput(t *testing.T) {
	for _, u := range []string{"", "ftp://127.0.0.1/", "http://", "127.0.0.1:8090", "/charges", "mailto:pay@example.com",
		"http://127.0.0.1:8090/?x=1", "http://127.0.0.1:8090/#top", "http://[::1", "http:opaque"} {
		if _, err := payment.NewHTTPProvider(u); !errors.Is(err, payment.ErrInvalid) {
			t.Errorf("%q: %v", u, err)
		}
	}
	for name, o := range map[string]payment.HTTPOption{
		"nil client":       payment.WithHTTPClient(nil),
		"zero timeout":     payment.WithAttemptTimeout(0),
		"negative retries": payment.WithRetries(-1, time.Millisecond),
		"too many retries": payment.WithRetries(21, time.Millisecond),
		"zero backoff":     payment.WithRetries(1, 0),
		"nil option":       nil,
	} {
		if _, err := payment.NewHTTPProvider("http://127.0.0.1:8090", o); !errors.Is(err, payment.ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := payment.NewHTTPProvider("http://127.0.0.1:8090", payment.WithRetries(1, time.Millisecond), nil); err == nil ||
		!strings.Contains(err.Error(), "option 1 is nil") {
		t.Errorf("a nil second option: %v, want an error naming option 1", err)
	}

	b := newHTTPBed(t)
	p := b.provider(t)
	for _, req := range []payment.ChargeRequest{
		{OrderID: "o", AmountCents: 1},
		{PaymentRequestID: "a b", OrderID: "o", AmountCents: 1},
		{PaymentRequestID: strings.Repeat("k", 256), OrderID: "o", AmountCents: 1},
		{PaymentRequestID: "k", AmountCents: 1},
		{PaymentRequestID: "k", OrderID: "o"},
		{PaymentRequestID: "k", OrderID: "o", AmountCents: -1},
	} {
		if _, err := p.Charge(context.Background(), req); !errors.Is(err, payment.ErrInvalid) || !errors.Is(err, payment.ErrRejected) {
			t.Errorf("%+v: %v, want ErrInvalid and ErrRejected", req, err)
		}
	}
	if _, err := p.Query(context.Background(), ""); !errors.Is(err, payment.ErrInvalid) {
		t.Errorf("empty query: %v", err)
	}
	if b.count() != 0 {
		t.Fatalf("invalid input was sent: %d requests", b.count())
	}
}

// HTTPProvider is a Provider.
var _ payment.Provider = (*payment.HTTPProvider)(nil)

// TestHTTPProviderRejectedCharge: a charge the provider answers 400 (its
// content refused) or 422 (its key known with other content) is rejected
// for good; any other 4xx (the call refused, not the charge) is ErrInvalid
// alone, and a query never counts as a rejection.
func TestHTTPProviderRejectedCharge(t *testing.T) {
	b := newHTTPBed(t)
	p := b.provider(t)
	ctx := context.Background()
	if err := b.fp.Inject("k400", fakepay.FaultReject, 1); err != nil {
		t.Fatal(err)
	}
	_, err := p.Charge(ctx, payment.ChargeRequest{PaymentRequestID: "k400", OrderID: "o", AmountCents: 5})
	if !errors.Is(err, payment.ErrRejected) || !errors.Is(err, payment.ErrInvalid) || !strings.Contains(err.Error(), "400") {
		t.Fatalf("400: %v", err)
	}
	if _, err := p.Charge(ctx, payment.ChargeRequest{PaymentRequestID: "k422", OrderID: "o", AmountCents: 5}); err != nil {
		t.Fatal(err)
	}
	_, err = p.Charge(ctx, payment.ChargeRequest{PaymentRequestID: "k422", OrderID: "other", AmountCents: 5})
	if !errors.Is(err, payment.ErrRejected) || !strings.Contains(err.Error(), "422") {
		t.Fatalf("422: %v", err)
	}
	b.setIntercept(func(_ int, w http.ResponseWriter, _ *http.Request) bool {
		w.WriteHeader(http.StatusUnauthorized)
		return true
	})
	_, err = p.Charge(ctx, payment.ChargeRequest{PaymentRequestID: "k401", OrderID: "o", AmountCents: 5})
	if !errors.Is(err, payment.ErrInvalid) || errors.Is(err, payment.ErrRejected) {
		t.Fatalf("401 charge: %v, want ErrInvalid alone", err)
	}
	if _, err := p.Query(ctx, "k401"); !errors.Is(err, payment.ErrInvalid) || errors.Is(err, payment.ErrRejected) {
		t.Fatalf("401 query: %v, want ErrInvalid alone", err)
	}
}
