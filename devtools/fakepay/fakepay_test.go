package fakepay_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/devtools/fakepay"
	"github.com/quorumlock/quorumlock/orders/payment"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// api is a client of one fakepay server.
type api struct {
	t   *testing.T
	url string
	c   *http.Client
}

// start runs a fakepay server in httptest and closes both at cleanup.
func start(t *testing.T, opts ...fakepay.Option) (*fakepay.Server, api) {
	t.Helper()
	s, err := fakepay.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		ts.Close()
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s, api{t: t, url: ts.URL, c: ts.Client()}
}

// oneShot returns a client that opens a new connection for every request,
// so that the transport never retries a request on its own.
func (a api) oneShot() api {
	tr := &http.Transport{DisableKeepAlives: true}
	a.t.Cleanup(tr.CloseIdleConnections)
	a.c = &http.Client{Transport: tr}
	return a
}

// do sends a request; a nil error means an answer arrived.
func (a api) do(method, path string, header http.Header, body string) (*http.Response, []byte, error) {
	a.t.Helper()
	req, err := http.NewRequest(method, a.url+path, strings.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := a.c.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	return resp, b, nil
}

// must is do that fails the test on a transport error or an unexpected
// status.
func (a api) must(want int, method, path string, header http.Header, body string) (*http.Response, []byte) {
	a.t.Helper()
	resp, b, err := a.do(method, path, header, body)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	if resp.StatusCode != want {
		a.t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, b, want)
	}
	if want >= 400 && resp.Header.Get("Content-Type") != "application/problem+json" {
		a.t.Fatalf("%s %s: %d with Content-Type %q", method, path, want, resp.Header.Get("Content-Type"))
	}
	return resp, b
}

func keyHeader(key string) http.Header { return http.Header{"Idempotency-Key": {key}} }

func chargeBody(order string, cents int64) string {
	return fmt.Sprintf(`{"order_id":%q,"amount_cents":%d}`, order, cents)
}

// charge charges key and expects a 200.
func (a api) charge(key, order string, cents int64) (fakepay.Charge, bool) {
	a.t.Helper()
	resp, b := a.must(http.StatusOK, "POST", "/charges", keyHeader(key), chargeBody(order, cents))
	var c fakepay.Charge
	if err := json.Unmarshal(b, &c); err != nil {
		a.t.Fatal(err)
	}
	return c, resp.Header.Get("Idempotent-Replayed") == "true"
}

func (a api) get(key string) fakepay.Charge {
	a.t.Helper()
	_, b := a.must(http.StatusOK, "GET", "/charges/"+key, nil, "")
	var c fakepay.Charge
	if err := json.Unmarshal(b, &c); err != nil {
		a.t.Fatal(err)
	}
	return c
}

func (a api) fault(key string, f fakepay.Fault, count int) {
	a.t.Helper()
	a.must(http.StatusOK, "POST", "/faults", nil, fmt.Sprintf(`{"key":%q,"fault":%q,"count":%d}`, key, f, count))
}

func (a api) stats() fakepay.Stats {
	a.t.Helper()
	_, b := a.must(http.StatusOK, "GET", "/stats", nil, "")
	var st fakepay.Stats
	if err := json.Unmarshal(b, &st); err != nil {
		a.t.Fatal(err)
	}
	return st
}

// waitFor polls cond for up to 10 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestChargeAndReplay(t *testing.T) {
	_, a := start(t)
	a.must(http.StatusOK, "GET", "/healthz", nil, "")
	c, replayed := a.charge("o1:pay", "o1", 1999)
	want := fakepay.Charge{PaymentRequestID: "o1:pay", OrderID: "o1", AmountCents: 1999, Status: payment.StatusSucceeded, ProviderRef: "ch_1"}
	if c != want || replayed {
		t.Fatalf("first charge %+v replayed=%v", c, replayed)
	}
	c2, replayed := a.charge("o1:pay", "o1", 1999)
	if c2 != want || !replayed {
		t.Fatalf("replay %+v replayed=%v", c2, replayed)
	}
	if got := a.get("o1:pay"); got != want {
		t.Fatalf("GET %+v", got)
	}
	a.must(http.StatusNotFound, "GET", "/charges/nope", nil, "")
	st := a.stats()
	if st.Charges != 1 || st.Requests != 2 || st.ByKey["o1:pay"] != (fakepay.KeyStats{Charged: 1, Received: 2, Status: payment.StatusSucceeded}) {
		t.Fatalf("stats %+v", st)
	}
	if c3, _ := a.charge("o2:pay", "o2", 5); c3.ProviderRef != "ch_2" {
		t.Fatalf("second key %+v", c3)
	}
}

// Keys with characters that are special in URLs are addressable.
func TestAwkwardKeys(t *testing.T) {
	_, a := start(t)
	for _, key := range []string{"a/b", "a//b/", "x?y#z%41", "%2F", "semi;colon", "...", "..", "."} {
		a.charge(key, "o", 1)
		esc := strings.NewReplacer("%", "%25", "/", "%2F", "?", "%3F", "#", "%23").Replace(key)
		if key == "." || key == ".." {
			esc = strings.ReplaceAll(key, ".", "%2E")
		}
		if got := a.get(esc); got.PaymentRequestID != key {
			t.Fatalf("key %q: GET %+v", key, got)
		}
	}
}

func TestConcurrentChargesOfOneKeyChargeOnce(t *testing.T) {
	_, a := start(t)
	const n = 50
	refs := make(chan string, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			resp, b, err := a.do("POST", "/charges", keyHeader("o1:pay"), chargeBody("o1", 100))
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Errorf("charge: %v %v %s", err, resp, b)
				return
			}
			var c fakepay.Charge
			_ = json.Unmarshal(b, &c)
			refs <- c.ProviderRef
		})
	}
	wg.Wait()
	close(refs)
	for ref := range refs {
		if ref != "ch_1" {
			t.Fatalf("ref %q", ref)
		}
	}
	st := a.stats()
	if st.Charges != 1 || st.Requests != n || st.ByKey["o1:pay"].Received != n {
		t.Fatalf("stats %+v", st)
	}
}

func TestKeyReusedWithAnotherRequestIs422(t *testing.T) {
	_, a := start(t)
	a.charge("k", "o1", 100)
	for _, body := range []string{chargeBody("o1", 101), chargeBody("o2", 100)} {
		_, b := a.must(http.StatusUnprocessableEntity, "POST", "/charges", keyHeader("k"), body)
		if !strings.Contains(string(b), `"code":"idempotency_key_mismatch"`) {
			t.Fatalf("body %s", b)
		}
	}
	if st := a.stats(); st.Charges != 1 || st.ByKey["k"].Received != 3 {
		t.Fatalf("stats %+v", st)
	}
}

func TestBadChargeRequestsAre400(t *testing.T) {
	_, a := start(t)
	good := chargeBody("o1", 100)
	cases := map[string]struct {
		header http.Header
		body   string
	}{
		"no key":          {nil, good},
		"empty key":       {keyHeader(""), good},
		"long key":        {keyHeader(strings.Repeat("k", 256)), good},
		"space in key":    {keyHeader("a b"), good},
		"non-ASCII key":   {keyHeader("clé"), good},
		"two keys":        {http.Header{"Idempotency-Key": {"a", "b"}}, good},
		"not JSON":        {keyHeader("k"), "order"},
		"empty body":      {keyHeader("k"), ""},
		"zero amount":     {keyHeader("k"), chargeBody("o1", 0)},
		"negative amount": {keyHeader("k"), chargeBody("o1", -5)},
		"float amount":    {keyHeader("k"), `{"order_id":"o1","amount_cents":1.5}`},
		"string amount":   {keyHeader("k"), `{"order_id":"o1","amount_cents":"100"}`},
		"no order":        {keyHeader("k"), `{"amount_cents":100}`},
		"unknown field":   {keyHeader("k"), `{"order_id":"o1","amount_cents":100,"currency":"EUR"}`},
		"trailing data":   {keyHeader("k"), good + good},
		"array":           {keyHeader("k"), "[]"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			a := a
			a.t = t
			a.must(http.StatusBadRequest, "POST", "/charges", c.header, c.body)
		})
	}
	if st := a.stats(); st.Requests != 0 || len(st.ByKey) != 0 {
		t.Fatalf("bad requests were counted: %+v", st)
	}
	_, b := a.must(http.StatusRequestEntityTooLarge, "POST", "/charges", keyHeader("k"),
		`{"order_id":"`+strings.Repeat("x", 70<<10)+`","amount_cents":1}`)
	if !strings.Contains(string(b), "payload_too_large") {
		t.Fatalf("body %s", b)
	}
}

func TestFaultDecline(t *testing.T) {
	_, a := start(t)
	a.fault("k", fakepay.FaultDecline, 1)
	if c, _ := a.charge("k", "o", 100); c.Status != payment.StatusFailed {
		t.Fatalf("declined charge %+v", c)
	}
	// The decline is the stored answer; a fault on a decided key changes
	// nothing.
	a.fault("k", fakepay.FaultPending, 1)
	if c, replayed := a.charge("k", "o", 100); c.Status != payment.StatusFailed || !replayed {
		t.Fatalf("replay %+v %v", c, replayed)
	}
	if st := a.stats(); st.Charges != 0 || st.ByKey["k"].Charged != 0 || st.ByKey["k"].Status != payment.StatusFailed {
		t.Fatalf("stats %+v", st)
	}
}

func TestFaultDrop(t *testing.T) {
	_, a := start(t)
	a = a.oneShot()
	a.fault("k", fakepay.FaultDrop, 1)
	if resp, _, err := a.do("POST", "/charges", keyHeader("k"), chargeBody("o", 100)); err == nil {
		t.Fatalf("dropped request answered %d", resp.StatusCode)
	}
	st := a.stats()
	if st.Charges != 0 || st.Requests != 0 || len(st.ByKey) != 0 {
		t.Fatalf("a dropped request left traces: %+v", st)
	}
	a.must(http.StatusNotFound, "GET", "/charges/k", nil, "")
	if c, replayed := a.charge("k", "o", 100); c.Status != payment.StatusSucceeded || replayed {
		t.Fatalf("charge after the drop %+v %v", c, replayed)
	}
}

func TestFaultLoseReply(t *testing.T) {
	_, a := start(t)
	a = a.oneShot()
	a.fault("k", fakepay.FaultLoseReply, 1)
	if resp, _, err := a.do("POST", "/charges", keyHeader("k"), chargeBody("o", 100)); err == nil {
		t.Fatalf("lost reply arrived: %d", resp.StatusCode)
	}
	if st := a.stats(); st.Charges != 1 || st.Requests != 1 {
		t.Fatalf("stats %+v", st)
	}
	if c := a.get("k"); c.Status != payment.StatusSucceeded {
		t.Fatalf("GET %+v", c)
	}
	if c, replayed := a.charge("k", "o", 100); c.Status != payment.StatusSucceeded || !replayed {
		t.Fatalf("retry %+v %v", c, replayed)
	}
	if st := a.stats(); st.Charges != 1 || st.Requests != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestFaultPendingAndComplete(t *testing.T) {
	_, a := start(t)
	a.fault("", fakepay.FaultPending, 2)
	for _, k := range []string{"k1", "k2"} {
		if c, _ := a.charge(k, "o", 100); c.Status != payment.StatusPending {
			t.Fatalf("%s: %+v", k, c)
		}
	}
	if c, _ := a.charge("k3", "o", 100); c.Status != payment.StatusSucceeded {
		t.Fatalf("k3 (faults used up): %+v", c)
	}
	if st := a.stats(); st.Charges != 1 {
		t.Fatalf("pending charges moved money: %+v", st)
	}
	_, b := a.must(http.StatusOK, "POST", "/charges/k1/complete", nil, `{"status":"SUCCEEDED"}`)
	if !strings.Contains(string(b), `"status":"SUCCEEDED"`) {
		t.Fatalf("complete: %s", b)
	}
	a.must(http.StatusOK, "POST", "/charges/k2/complete", nil, `{"status":"FAILED"}`)
	_, b = a.must(http.StatusConflict, "POST", "/charges/k1/complete", nil, `{"status":"FAILED"}`)
	if !strings.Contains(string(b), "not_pending") {
		t.Fatalf("complete twice: %s", b)
	}
	a.must(http.StatusNotFound, "POST", "/charges/nope/complete", nil, `{"status":"FAILED"}`)
	a.must(http.StatusBadRequest, "POST", "/charges/k3/complete", nil, `{"status":"PENDING"}`)
	a.must(http.StatusBadRequest, "POST", "/charges/k3/complete", nil, `{}`)
	if c := a.get("k1"); c.Status != payment.StatusSucceeded {
		t.Fatalf("k1 %+v", c)
	}
	if c, replayed := a.charge("k2", "o", 100); c.Status != payment.StatusFailed || !replayed {
		t.Fatalf("k2 replay %+v", c)
	}
	if st := a.stats(); st.Charges != 2 || st.ByKey["k1"].Charged != 1 || st.ByKey["k2"].Charged != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// Faults for a specific key are used before faults for any key, and each
// fault is used by one request.
func TestFaultOrder(t *testing.T) {
	s, a := start(t)
	a.fault("", fakepay.FaultDecline, 1)
	a.fault("a", fakepay.FaultPending, 1)
	if err := s.Inject("b", fakepay.FaultDecline, 2); err != nil {
		t.Fatal(err)
	}
	got := map[string]payment.Status{}
	for _, k := range []string{"a", "c", "d"} {
		c, _ := a.charge(k, "o", 1)
		got[k] = c.Status
	}
	if got["a"] != payment.StatusPending || got["c"] != payment.StatusFailed || got["d"] != payment.StatusSucceeded {
		t.Fatalf("statuses %v", got)
	}
	// Both faults of b are used by b's requests, the second on a decided
	// key: it changes nothing.
	a.charge("b", "o", 1)
	a.charge("b", "o", 1)
	if c, _ := a.charge("b2", "o", 1); c.Status != payment.StatusSucceeded {
		t.Fatalf("b's faults leaked to another key: %+v", c)
	}
}

func TestBadFaultsAre400(t *testing.T) {
	s, a := start(t)
	for _, body := range []string{
		`{"fault":"explode"}`,
		`{"fault":""}`,
		`{"fault":"decline","count":-1}`,
		`{"fault":"decline","count":1001}`,
		`{"key":"a b","fault":"decline"}`,
		`{"fault":"decline","colour":"red"}`,
		`nope`,
	} {
		a.must(http.StatusBadRequest, "POST", "/faults", nil, body)
	}
	if err := s.Inject("", fakepay.FaultDrop, 0); !errors.Is(err, fakepay.ErrInvalid) {
		t.Fatalf("count 0: %v", err)
	}
	// An omitted count is 1.
	a.must(http.StatusOK, "POST", "/faults", nil, `{"fault":"decline"}`)
	if c, _ := a.charge("k1", "o", 1); c.Status != payment.StatusFailed {
		t.Fatalf("k1 %+v", c)
	}
	if c, _ := a.charge("k2", "o", 1); c.Status != payment.StatusSucceeded {
		t.Fatalf("k2 %+v", c)
	}
}

func TestRestartFromDataFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fakepay.jsonl")
	s1, err := fakepay.New(fakepay.WithDataFile(path))
	if err != nil {
		t.Fatal(err)
	}
	ts1 := httptest.NewServer(s1.Handler())
	a := api{t: t, url: ts1.URL, c: ts1.Client()}
	a.charge("a", "oa", 100)
	a.fault("b", fakepay.FaultPending, 1)
	a.charge("b", "ob", 200)
	a.fault("c", fakepay.FaultDecline, 1)
	a.charge("c", "oc", 300)
	a.fault("", fakepay.FaultDecline, 5) // faults do not survive a restart
	ts1.Close()
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}

	s2, a := start(t, fakepay.WithDataFile(path))
	st := a.stats()
	if st.Charges != 1 || st.Requests != 0 || len(st.ByKey) != 3 ||
		st.ByKey["b"].Status != payment.StatusPending || st.ByKey["c"].Status != payment.StatusFailed {
		t.Fatalf("stats after restart %+v", st)
	}
	if c, replayed := a.charge("a", "oa", 100); !replayed || c.ProviderRef != "ch_1" || c.Status != payment.StatusSucceeded {
		t.Fatalf("replay after restart %+v %v", c, replayed)
	}
	a.must(http.StatusUnprocessableEntity, "POST", "/charges", keyHeader("a"), chargeBody("oa", 1))
	if c, _ := a.charge("d", "od", 400); c.ProviderRef != "ch_4" || c.Status != payment.StatusSucceeded {
		t.Fatalf("new charge after restart %+v", c)
	}
	if _, err := s2.Complete("b", payment.StatusSucceeded); err != nil {
		t.Fatal(err)
	}
	if st := a.stats(); st.Charges != 3 {
		t.Fatalf("stats %+v", st)
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Complete("b", payment.StatusFailed); !errors.Is(err, fakepay.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}

	// A torn last line (a write that was never answered) is cut off.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"op":"charge","key":"e","order_id":"oe","amo`); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	s3, err := fakepay.New(fakepay.WithDataFile(path))
	if err != nil {
		t.Fatal(err)
	}
	st = s3.Stats()
	if st.Charges != 3 || len(st.ByKey) != 4 || st.ByKey["b"].Status != payment.StatusSucceeded {
		t.Fatalf("stats after the second restart %+v", st)
	}
	if _, err := s3.Lookup("e"); !errors.Is(err, fakepay.ErrNotFound) {
		t.Fatalf("torn charge: %v", err)
	}
	if err := s3.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(raw), "\n") || strings.Contains(string(raw), `"key":"e"`) {
		t.Fatalf("torn line left in the file:\n%s", raw)
	}

	// A bad whole line is corruption, not something to skip.
	if err := os.WriteFile(path, append(raw, "not json\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := fakepay.New(fakepay.WithDataFile(path)); !errors.Is(err, fakepay.ErrCorrupt) {
		t.Fatalf("corrupt file: %v", err)
	}
}

func TestBadOptions(t *testing.T) {
	for name, o := range map[string]fakepay.Option{
		"empty data path":  fakepay.WithDataFile(""),
		"ftp callback":     fakepay.WithCallback("ftp://127.0.0.1/cb", []byte("s")),
		"relative URL":     fakepay.WithCallback("/cb", []byte("s")),
		"bad URL":          fakepay.WithCallback("http://[::1", []byte("s")),
		"empty secret":     fakepay.WithCallback("http://127.0.0.1/cb", nil),
		"nil client":       fakepay.WithHTTPClient(nil),
		"nil clock":        fakepay.WithClock(nil),
		"nil logger":       fakepay.WithLogger(nil),
		"zero attempts":    fakepay.WithCallbackRetry(0, time.Second),
		"too many":         fakepay.WithCallbackRetry(101, time.Second),
		"zero backoff":     fakepay.WithCallbackRetry(3, 0),
		"data dir missing": fakepay.WithDataFile(filepath.Join(t.TempDir(), "no", "such", "file")),
		"nil option":       nil,
	} {
		s, err := fakepay.New(o)
		if err == nil {
			_ = s.Close()
			t.Fatalf("%s: accepted", name)
		}
		if name != "data dir missing" && !errors.Is(err, fakepay.ErrInvalid) {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if _, err := fakepay.New(fakepay.WithLogger(slog.Default()), nil); err == nil || !strings.Contains(err.Error(), "option 1 is nil") {
		t.Fatalf("a nil second option: %v, want an error naming option 1", err)
	}
}

func TestClosedServerAnswers503(t *testing.T) {
	s, a := start(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	a.must(http.StatusServiceUnavailable, "POST", "/charges", keyHeader("k"), chargeBody("o", 1))
	if err := s.Inject("", fakepay.FaultDecline, 1); !errors.Is(err, fakepay.ErrClosed) {
		t.Fatal(err)
	}
}
