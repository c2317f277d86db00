package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeOrdersd answers POST /orders by the request's number (its key,
// modulo 6): 201, 409, 503 with and without a Retry-After, no answer until
// the client gives up, 500; and serves its count of answered requests on
// /metrics as ordersd does.
type fakeOrdersd struct {
	answered atomic.Int64
	quit     chan struct{} // closed at the test's end: no request waits longer
}

// startFake starts a fake on loopback, stopped at the test's end.
func startFake(t *testing.T) *httptest.Server {
	f := &fakeOrdersd{quit: make(chan struct{})}
	srv := httptest.NewServer(f)
	t.Cleanup(func() {
		close(f.quit)
		srv.Close()
	})
	return srv
}

func (f *fakeOrdersd) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/metrics" {
		fmt.Fprintf(w, "orders_http_request_duration_seconds_count{code=\"201\",route=\"POST /orders\"} %d\n", f.answered.Load())
		return
	}
	defer f.answered.Add(1)
	// The server notices a client that went away once the body is read.
	_, _ = io.Copy(io.Discard, r.Body)
	if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") || r.Header.Get("Content-Type") != "application/json" {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	n, _ := seqOf(r.Header.Get("Idempotency-Key"))
	switch n % 6 {
	case 0:
		w.WriteHeader(http.StatusCreated)
	case 1:
		w.WriteHeader(http.StatusConflict)
	case 2:
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, `{"code":"service_unavailable"}`)
	case 3:
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, `{"code":"service_unavailable"}`)
	case 4:
		select {
		case <-r.Context().Done(): // the client gave up
		case <-f.quit:
		}
	case 5:
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, `{"code":"internal_error"}`)
	}
}

// TestLoaderAgainstAFake: one client's answers are counted by kind, the
// timeout is a timeout, and settle sees every request answered.
func TestLoaderAgainstAFake(t *testing.T) {
	srv := startFake(t)
	c := config{urls: []string{srv.URL}, timeout: 50 * time.Millisecond, distinct: 1}
	l := newLoader(c)
	defer l.close()
	u, err := newUser([]byte(strings.Repeat("s", 32)), "u1", "p1")
	if err != nil {
		t.Fatal(err)
	}
	var tl tally
	for n := range 12 {
		a, _ := l.post(t.Context(), srv.URL, u, idempotencyKey(n))
		tl.record(n, a, true, time.Millisecond)
	}
	if tl.counts != [numKinds]int{2, 2, 2, 2, 2, 2} || tl.others["500 internal_error"] != 2 {
		t.Fatalf("counts %v others %v", tl.counts, tl.others)
	}
	if fmt.Sprint(tl.created) != "[0 6]" || fmt.Sprint(tl.uncertain) != "[4 5 10 11]" {
		t.Fatalf("created %v uncertain %v", tl.created, tl.uncertain)
	}
	got, err := l.settle(t.Context(), 0, 12, 5*time.Second)
	if err != nil || got != 12 {
		t.Fatalf("settle: %d, %v", got, err)
	}
	got, err = l.settle(t.Context(), 0, 13, 0) // never reached: returns at once
	if err != nil || got != 12 {
		t.Fatalf("settle without a wait: %d, %v", got, err)
	}
}

// TestDriveStops: the closed loops stop by themselves at the window's end.
func TestDriveStops(t *testing.T) {
	srv := startFake(t)
	c := config{urls: []string{srv.URL, srv.URL}, timeout: 50 * time.Millisecond, distinct: 2, popular: 3, jwtSecret: []byte(strings.Repeat("s", 32))}
	sides, err := makeSides(c, "t")
	if err != nil {
		t.Fatal(err)
	}
	l := newLoader(c)
	defer l.close()
	start := time.Now()
	w := window{start: start, end: start.Add(200 * time.Millisecond)}
	tallies := l.drive(t.Context(), sides, w)
	if len(tallies) != 2 || len(tallies[0]) != 2 || len(tallies[1]) != 3 {
		t.Fatalf("tallies %d", len(tallies))
	}
	r := figures(c, sides, tallies, w)
	if r.Sent == 0 || r.Sides[0].Side != sideDistinct || r.Sides[1].Side != sidePopular || r.Sides[1].Created == 0 {
		t.Fatalf("figures %+v", r)
	}
	if sides[1].products[0] != "ol.t.popular" || sides[0].products[1] != "ol.t.d2" || sides[1].users[2].product != "ol.t.popular" {
		t.Fatalf("products %v %v", sides[0].products, sides[1].products)
	}
}
