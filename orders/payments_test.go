package orders_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/devtools/fakepay"
	"github.com/quorumlock/quorumlock/orders"
	"github.com/quorumlock/quorumlock/orders/payment"
	"github.com/quorumlock/quorumlock/orders/store"
)

var callbackSecret = []byte("callback-secret-of-32-bytes-len!")

// The seed's payment failures on three instances that share one provider:
// concurrent pay requests for every order on all three, a lost reply, a
// request that never arrived, a charge left pending, and callbacks
// delivered several times. Every order ends PAID and the provider counts
// exactly one charge for each.
func TestChargedOnceAcrossInstances(t *testing.T) {
	r := newRig(t, 100)
	// The provider calls back the first instance; callbacks and the
	// reconcilers of all three settle the payments.
	cbMux := http.NewServeMux()
	cbSrv := httptest.NewServer(cbMux)
	t.Cleanup(cbSrv.Close)
	callbackURL := cbSrv.URL + "/payments/callback"
	pay, err := fakepay.New(fakepay.WithCallback(callbackURL, callbackSecret), fakepay.WithCallbackRetry(20, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	paySrv := httptest.NewServer(pay.Handler())
	t.Cleanup(func() {
		paySrv.Close()
		_ = pay.Close()
	})
	// Keep-alives off: a reply the provider loses must reach the client as
	// a closed connection, not as a transport-level replay.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	var ins []*instance
	for range 3 {
		p, err := payment.NewHTTPProvider(paySrv.URL, payment.WithHTTPClient(client), payment.WithAttemptTimeout(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		ins = append(ins, r.instanceWith(t, p, orders.WithPaymentCallbacks(callbackSecret, 0)))
	}
	first := ins[0]
	cbMux.Handle("/", first.srv.Config.Handler)

	const n = 6
	var ids []string
	for i := range n {
		a := post(t, first, "u1001", fmt.Sprintf("pay-%d", i), buy42)
		if a.Status != http.StatusCreated {
			t.Fatalf("order %d: %d %s", i, a.Status, a.Body)
		}
		ids = append(ids, a.json(t)["orderId"].(string))
	}
	rid := func(i int) string { return payment.RequestID(ids[i]) }
	for key, f := range map[string]fakepay.Fault{
		rid(0): fakepay.FaultLoseReply,
		rid(1): fakepay.FaultDrop,
		rid(2): fakepay.FaultPending,
		rid(3): fakepay.FaultDuplicateCallback,
	} {
		count := 1
		if f == fakepay.FaultDuplicateCallback {
			count = 3
		}
		if err := pay.Inject(key, f, count); err != nil {
			t.Fatal(err)
		}
	}

	// Every order is paid from all three instances at once.
	tok := tokenFor(t, "u1001")
	var wg sync.WaitGroup
	for _, id := range ids {
		for _, in := range ins {
			wg.Go(func() {
				a := do(t, http.MethodPost, in.srv.URL+"/orders/"+id+"/pay", tok, "", nil)
				if a.Status != http.StatusOK && a.Status != http.StatusAccepted {
					t.Errorf("pay %s: %d %s", id, a.Status, a.Body)
				}
			})
		}
	}
	wg.Wait()

	// The pending charge completes at the provider: its callback settles it.
	if _, err := pay.Complete(rid(2), payment.StatusSucceeded); err != nil {
		t.Fatal(err)
	}
	// The reconcilers of the three instances run at once, rounds apart
	// (aging the attempts as the provider timeout passing would), until
	// every order is settled.
	ctx := context.Background()
	status := func(id string) store.Status {
		o, err := r.st.GetOrder(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return o.Status
	}
	settled := func() bool {
		for _, id := range ids {
			if status(id) != store.StatusPaid {
				return false
			}
		}
		return true
	}
	for round := 0; !settled(); round++ {
		if round == 20 {
			for _, id := range ids {
				t.Logf("%s: %s", id, status(id))
			}
			t.Fatal("orders not settled after 20 reconcile rounds")
		}
		if _, err := r.pool.Exec(ctx, `UPDATE payments SET updated_at = now() - interval '1 hour' WHERE status = 'PENDING'`); err != nil {
			t.Fatal(err)
		}
		for _, in := range ins {
			wg.Go(func() { _, _ = in.payments.Reconcile(ctx, 0) })
		}
		wg.Wait()
	}
	// Every callback is delivered (the duplicated ones included).
	deadline := time.Now().Add(30 * time.Second)
	for st := pay.Stats(); st.Callbacks.Queued > 0 || st.Callbacks.Delivered < n+3; st = pay.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("callbacks %+v", st.Callbacks)
		}
		time.Sleep(20 * time.Millisecond)
	}

	st := pay.Stats()
	if st.Charges != n {
		t.Fatalf("the provider charged %d times for %d orders: %+v", st.Charges, n, st.ByKey)
	}
	for i := range n {
		if k := st.ByKey[rid(i)]; k.Charged != 1 {
			t.Fatalf("order %d charged %d times (%d requests)", i, k.Charged, k.Received)
		}
	}
	var events int
	if err := r.pool.QueryRow(ctx, `SELECT count(DISTINCT event_id) FROM payment_events`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	t.Logf("charges %d for %d orders; charge requests %d; callbacks delivered %d, %d distinct events recorded", st.Charges, n, st.Requests, st.Callbacks.Delivered, events)
}

// A callback settles its payment once; a replay, a contradicting callback
// and a forged one change nothing and get a clear answer.
func TestCallbackAnswers(t *testing.T) {
	r := newRig(t, 10)
	in := r.instance(t, orders.WithPaymentCallbacks(callbackSecret, 0))
	a := post(t, in, "u1001", "cb-1", buy42)
	if a.Status != http.StatusCreated {
		t.Fatalf("%d %s", a.Status, a.Body)
	}
	id := a.json(t)["orderId"].(string)
	// The charge's reply is lost: the order stays PAYING until the
	// provider's callback arrives.
	in.provider.LoseReplyNext(payment.RequestID(id))
	tok := tokenFor(t, "u1001")
	if a := do(t, http.MethodPost, in.srv.URL+"/orders/"+id+"/pay", tok, "", nil); a.Status != http.StatusAccepted {
		t.Fatalf("pay: %d %s", a.Status, a.Body)
	}
	callback := func(body string, secret []byte) answer {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, in.srv.URL+"/payments/callback", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if secret != nil {
			req.Header.Set(payment.SignatureHeader, payment.SignCallback(secret, []byte(body), time.Now()))
		}
		return send(t, req)
	}
	ok := fmt.Sprintf(`{"event_id":"evt_a","payment_request_id":%q,"status":"SUCCEEDED","provider_ref":"ch_9"}`, payment.RequestID(id))
	for name, c := range map[string]struct {
		body   string
		secret []byte
		want   int
	}{
		"unsigned":   {ok, nil, http.StatusUnauthorized},
		"forged":     {ok, []byte("not-the-secret-not-the-secret!!!"), http.StatusUnauthorized},
		"not json":   {`{"event_id":`, callbackSecret, http.StatusBadRequest},
		"unknown":    {`{"event_id":"evt_x","payment_request_id":"ord_nope:pay","status":"SUCCEEDED"}`, callbackSecret, http.StatusNotFound},
		"bad status": {fmt.Sprintf(`{"event_id":"evt_y","payment_request_id":%q,"status":"PENDING"}`, payment.RequestID(id)), callbackSecret, http.StatusBadRequest},
	} {
		if got := callback(c.body, c.secret); got.Status != c.want {
			t.Fatalf("%s: %d %s, want %d", name, got.Status, got.Body, c.want)
		}
	}
	if o, _ := r.st.GetOrder(context.Background(), id); o.Status != store.StatusPaying {
		t.Fatalf("refused callbacks moved the order to %s", o.Status)
	}
	if got := callback(ok, callbackSecret); got.Status != http.StatusOK || got.json(t)["applied"] != true || got.json(t)["status"] != "PAID" {
		t.Fatalf("first delivery: %d %s", got.Status, got.Body)
	}
	if got := callback(ok, callbackSecret); got.Status != http.StatusOK || got.json(t)["applied"] != false {
		t.Fatalf("replay: %d %s", got.Status, got.Body)
	}
	late := fmt.Sprintf(`{"event_id":"evt_b","payment_request_id":%q,"status":"FAILED"}`, payment.RequestID(id))
	if got := callback(late, callbackSecret); got.Status != http.StatusConflict {
		t.Fatalf("contradicting callback: %d %s", got.Status, got.Body)
	}
	if o, _ := r.st.GetOrder(context.Background(), id); o.Status != store.StatusPaid {
		t.Fatalf("order %s after the contradicting callback", o.Status)
	}
	// An instance without a callback secret takes no callbacks.
	plain := r.instance(t)
	req, _ := http.NewRequest(http.MethodPost, plain.srv.URL+"/payments/callback", strings.NewReader(ok))
	req.Header.Set(payment.SignatureHeader, payment.SignCallback(callbackSecret, []byte(ok), time.Now()))
	if got := send(t, req); got.Status != http.StatusNotFound {
		t.Fatalf("callback without a secret configured: %d", got.Status)
	}
}
