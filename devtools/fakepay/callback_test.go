package fakepay_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/devtools/fakepay"
	"github.com/quorumlock/quorumlock/orders/payment"
)

var cbSecret = []byte("whsec_test_0123456789")

// receiver is a callback endpoint that verifies signatures and answers
// with the status its respond function picks for the n-th request (from
// 1).
type receiver struct {
	t       *testing.T
	url     string
	now     func() time.Time
	respond func(n int, r *http.Request) int

	mu     sync.Mutex
	n      int
	events []fakepay.CallbackEvent // verified, in arrival order
}

func newReceiver(t *testing.T, now func() time.Time, respond func(n int, r *http.Request) int) *receiver {
	t.Helper()
	rc := &receiver{t: t, now: now, respond: respond}
	ts := httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(ts.Close)
	rc.url = ts.URL + "/callbacks/fakepay"
	return rc
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	rc.mu.Lock()
	rc.n++
	n := rc.n
	rc.mu.Unlock()
	if r.Method != http.MethodPost || r.URL.Path != "/callbacks/fakepay" || r.Header.Get("Content-Type") != "application/json" {
		rc.t.Errorf("callback %s %s %q", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
	}
	if err := payment.VerifyCallback(cbSecret, r.Header.Get(payment.SignatureHeader), body, rc.now(), time.Minute); err != nil {
		rc.t.Errorf("callback %s: %v", body, err)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	status := http.StatusNoContent
	if rc.respond != nil {
		status = rc.respond(n, r)
	}
	if status/100 == 2 || status == http.StatusConflict {
		var ev fakepay.CallbackEvent
		if err := json.Unmarshal(body, &ev); err != nil {
			rc.t.Errorf("callback body %s: %v", body, err)
		}
		rc.mu.Lock()
		rc.events = append(rc.events, ev)
		rc.mu.Unlock()
	}
	w.WriteHeader(status)
}

func (rc *receiver) got() (requests int, events []fakepay.CallbackEvent) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.n, append([]fakepay.CallbackEvent(nil), rc.events...)
}

// settled waits until the server has no callback queued or in flight.
func settled(t *testing.T, s *fakepay.Server) fakepay.CallbackStats {
	t.Helper()
	waitFor(t, "callbacks to settle", func() bool { return s.Stats().Callbacks.Queued == 0 })
	return s.Stats().Callbacks
}

func TestCallbacksAreSignedAndSentOnFinalStatus(t *testing.T) {
	// A clock an hour ahead: the signatures carry the server's clock, and
	// the receiver verifies against the same one.
	clock := func() time.Time { return time.Now().Add(time.Hour) }
	rc := newReceiver(t, clock, nil)
	s, a := start(t, fakepay.WithCallback(rc.url, cbSecret), fakepay.WithClock(clock))

	a.charge("ok", "o1", 100)
	a.fault("no", fakepay.FaultDecline, 1)
	a.charge("no", "o2", 100)
	a.fault("later", fakepay.FaultPending, 1)
	a.charge("later", "o3", 100)
	a.charge("ok", "o1", 100) // a replay sends nothing
	settled(t, s)
	_, evs := rc.got()
	if len(evs) != 2 {
		t.Fatalf("callbacks %+v", evs)
	}
	byKey := map[string]fakepay.CallbackEvent{}
	for _, ev := range evs {
		byKey[ev.PaymentRequestID] = ev
	}
	if ev := byKey["ok"]; ev.Status != payment.StatusSucceeded || ev.ProviderRef != "ch_1" || len(ev.EventID) < 5 || ev.EventID[:4] != "evt_" {
		t.Fatalf("ok: %+v", ev)
	}
	if ev := byKey["no"]; ev.Status != payment.StatusFailed || ev.ProviderRef != "ch_2" {
		t.Fatalf("no: %+v", ev)
	}
	if byKey["ok"].EventID == byKey["no"].EventID {
		t.Fatalf("two charges share an event id: %+v", evs)
	}

	a.must(http.StatusOK, "POST", "/charges/later/complete", nil, `{"status":"SUCCEEDED"}`)
	st := settled(t, s)
	_, evs = rc.got()
	if len(evs) != 3 || evs[2].PaymentRequestID != "later" || evs[2].Status != payment.StatusSucceeded {
		t.Fatalf("callbacks %+v", evs)
	}
	if st.Delivered != 3 || st.Attempts != 3 || st.GivenUp != 0 || st.Dropped != 0 {
		t.Fatalf("callback stats %+v", st)
	}
}

func TestDuplicateCallback(t *testing.T) {
	rc := newReceiver(t, time.Now, nil)
	s, a := start(t, fakepay.WithCallback(rc.url, cbSecret))
	a.fault("k", fakepay.FaultDuplicateCallback, 2)
	a.charge("k", "o", 100)
	a.charge("other", "o", 100) // the fault was one fault, used by k
	settled(t, s)
	_, evs := rc.got()
	if len(evs) != 4 {
		t.Fatalf("callbacks %+v", evs)
	}
	var ks []fakepay.CallbackEvent
	for _, ev := range evs {
		if ev.PaymentRequestID == "k" {
			ks = append(ks, ev)
		}
	}
	if len(ks) != 3 || ks[0] != ks[1] || ks[1] != ks[2] {
		t.Fatalf("k's callbacks %+v, want the same event three times", ks)
	}
}

func TestCallbackRetriesAreBounded(t *testing.T) {
	rc := newReceiver(t, time.Now, func(int, *http.Request) int { return http.StatusInternalServerError })
	s, a := start(t, fakepay.WithCallback(rc.url, cbSecret), fakepay.WithCallbackRetry(4, time.Millisecond))
	a.charge("k", "o", 100)
	st := settled(t, s)
	if n, _ := rc.got(); n != 4 || st.Attempts != 4 || st.GivenUp != 1 || st.Delivered != 0 {
		t.Fatalf("receiver saw %d requests; stats %+v", n, st)
	}
	// No further attempt comes later.
	time.Sleep(50 * time.Millisecond)
	if n, _ := rc.got(); n != 4 {
		t.Fatalf("receiver saw %d requests", n)
	}
}

func TestCallbackRetriedUntilDelivered(t *testing.T) {
	rc := newReceiver(t, time.Now, func(n int, _ *http.Request) int {
		switch n {
		case 1:
			return http.StatusServiceUnavailable
		case 2:
			return http.StatusTooManyRequests
		case 3:
			return http.StatusOK
		}
		return http.StatusConflict // the receiver already has it: delivered
	})
	s, a := start(t, fakepay.WithCallback(rc.url, cbSecret), fakepay.WithCallbackRetry(8, time.Millisecond))
	a.charge("k", "o", 100)
	if st := settled(t, s); st.Attempts != 3 || st.Delivered != 1 {
		t.Fatalf("stats %+v", st)
	}
	a.fault("k2", fakepay.FaultDuplicateCallback, 1)
	a.charge("k2", "o", 100)
	if st := settled(t, s); st.Attempts != 5 || st.Delivered != 3 || st.GivenUp != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// Close does not wait for a slow receiver or a long backoff.
func TestCloseStopsTheWorker(t *testing.T) {
	release := make(chan struct{})
	rc := newReceiver(t, time.Now, func(n int, r *http.Request) int {
		if n == 1 {
			return http.StatusBadGateway
		}
		select { // hang until the sender gives up or the test ends
		case <-r.Context().Done():
		case <-release:
		}
		return http.StatusOK
	})
	t.Cleanup(func() { close(release) }) // runs before the receiver closes

	s1, err := fakepay.New(fakepay.WithCallback(rc.url, cbSecret), fakepay.WithCallbackRetry(3, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ts1 := httptest.NewServer(s1.Handler())
	a := api{t: t, url: ts1.URL, c: ts1.Client()}
	a.charge("k", "o", 100)
	waitFor(t, "the first attempt", func() bool { n, _ := rc.got(); return n == 1 })
	ts1.Close()
	began := time.Now()
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d > 2*time.Second {
		t.Fatalf("Close waited %v during a backoff", d)
	}

	s2, err := fakepay.New(fakepay.WithCallback(rc.url, cbSecret))
	if err != nil {
		t.Fatal(err)
	}
	ts2 := httptest.NewServer(s2.Handler())
	defer ts2.Close()
	a = api{t: t, url: ts2.URL, c: ts2.Client()}
	a.charge("k", "o", 100)
	waitFor(t, "the hanging attempt", func() bool { n, _ := rc.got(); return n == 2 })
	began = time.Now()
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d > 2*time.Second {
		t.Fatalf("Close waited %v for a hanging receiver", d)
	}
}

// A callback that was not delivered before a restart is delivered after
// it; one that was is not sent again.
func TestCallbacksSurviveARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fakepay.jsonl")
	// The first delivery fails, later ones succeed.
	rc := newReceiver(t, time.Now, func(n int, _ *http.Request) int {
		if n == 1 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	s1, err := fakepay.New(fakepay.WithDataFile(path), fakepay.WithCallback(rc.url, cbSecret),
		fakepay.WithCallbackRetry(8, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ts1 := httptest.NewServer(s1.Handler())
	a := api{t: t, url: ts1.URL, c: ts1.Client()}
	a.charge("k", "o", 100)
	waitFor(t, "the first attempt", func() bool { n, _ := rc.got(); return n == 1 })
	ts1.Close()
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}

	s2, err := fakepay.New(fakepay.WithDataFile(path), fakepay.WithCallback(rc.url, cbSecret))
	if err != nil {
		t.Fatal(err)
	}
	settled(t, s2)
	if _, evs := rc.got(); len(evs) != 1 || evs[0].PaymentRequestID != "k" {
		t.Fatalf("callbacks %+v", evs)
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}

	s3, err := fakepay.New(fakepay.WithDataFile(path), fakepay.WithCallback(rc.url, cbSecret))
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()
	if st := s3.Stats().Callbacks; st.Queued != 0 {
		t.Fatalf("a delivered callback was queued again: %+v", st)
	}
}
