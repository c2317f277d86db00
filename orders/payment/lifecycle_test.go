package payment_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/devtools/fakepay"
	"github.com/quorumlock/quorumlock/orders/payment"
	"github.com/quorumlock/quorumlock/orders/request"
	"github.com/quorumlock/quorumlock/orders/store"
)

// answer is one way a provider can answer an order's first charge, and
// what it does later when asked again.
type answer struct {
	name  string
	free  bool          // the order costs nothing
	fault fakepay.Fault // played on the first charge; "" for none
	// decide is what the provider eventually says about a charge it kept
	// PENDING; 0 when it never keeps one pending.
	decide payment.Status
	// want is where the walk must end, and whether the rejected payment
	// records its reason.
	want store.Status
}

// exit is one of the ways an order leaves a state: an API call, the
// reconciler or the reaper.
type exit struct {
	name string
	run  func(ctx context.Context, e *env, orderID string) error
}

func lifecycleExits(t *testing.T) []exit {
	return []exit{
		{"pay (API)", func(ctx context.Context, e *env, id string) error {
			_, err := e.svc.Pay(ctx, id)
			return err
		}},
		{"cancel (API)", func(ctx context.Context, e *env, id string) error {
			_, err := e.st.Cancel(ctx, id)
			return err
		}},
		{"reconciler", func(ctx context.Context, e *env, id string) error {
			e.age(t)
			_, err := e.svc.Reconcile(ctx, 0)
			return err
		}},
		{"reaper", func(ctx context.Context, e *env, id string) error {
			if _, err := e.pool.Exec(ctx, `UPDATE orders SET created_at = created_at - interval '1 hour',
updated_at = updated_at - interval '1 hour' WHERE order_id = $1`, id); err != nil {
				return err
			}
			_, err := e.st.ExpireOrders(ctx, time.Minute, store.MaxExpireBatch)
			return err
		}},
	}
}

// testEveryStateHasAWayOut walks an order through the state machine under
// each provider answer: from every state it reaches, some exit (API,
// reconciler or reaper) moves it on, until it is PAID or CANCELLED. A state
// that no exit leaves fails the test, and so does a walk that ends
// anywhere but where the answer leads, or a stock balance that does not
// hold at its end.
func testEveryStateHasAWayOut(t *testing.T, srv pgServer) {
	answers := []answer{
		{name: "succeeds", want: store.StatusPaid},
		{name: "declines", fault: fakepay.FaultDecline, want: store.StatusCancelled},
		{name: "loses the reply", fault: fakepay.FaultLoseReply, want: store.StatusPaid},
		{name: "loses the request", fault: fakepay.FaultDrop, want: store.StatusPaid},
		{name: "pending, then succeeds", fault: fakepay.FaultPending, decide: payment.StatusSucceeded, want: store.StatusPaid},
		{name: "pending, then declines", fault: fakepay.FaultPending, decide: payment.StatusFailed, want: store.StatusCancelled},
		{name: "rejects the request", fault: fakepay.FaultReject, want: store.StatusCancelled},
		{name: "free order", free: true, want: store.StatusPaid},
	}
	for _, a := range answers {
		// Tried in both orders, the exits all get their turn: the API
		// first, or the background jobs (reaper, reconciler) first.
		for _, backgroundFirst := range []bool{false, true} {
			name := strings.ReplaceAll(a.name, " ", "_") + map[bool]string{false: "/api_first", true: "/reaper_first"}[backgroundFirst]
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				walk(t, newEnv(t, srv), a, backgroundFirst)
			})
		}
	}
}

// walk runs one answer's order to a final state.
func walk(t *testing.T, e *env, a answer, backgroundFirst bool) {
	ctx := context.Background()
	if err := e.st.SeedProduct(ctx, "free", 10, 0); err != nil {
		t.Fatal(err)
	}
	product := "42"
	if a.free {
		product = "free"
	}
	o := placeOf(t, e, product)
	rid := payment.RequestID(o.ID)
	if a.fault != "" {
		e.fake.Inject(rid, a.fault, 1)
	}
	// The first exit the user takes is to pay; every state after that
	// must have a way out of its own.
	path := []string{string(store.StatusCreated) + " [pay (API)]"}
	_, _ = e.svc.Pay(ctx, o.ID)
	decided := false
	for step := 0; ; step++ {
		cur, err := e.st.GetOrder(ctx, o.ID)
		if err != nil {
			t.Fatal(err)
		}
		path = append(path, string(cur.Status))
		if cur.Status.Final() {
			break
		}
		if step == 5 {
			t.Fatalf("%s: no final state after %d steps: %s", a.name, step, strings.Join(path, " -> "))
		}
		by, moved := tryExits(t, e, o.ID, cur.Status, backgroundFirst)
		if !moved && a.decide != "" && !decided {
			// The provider decides the charge it kept pending; the
			// reconciler must then find it.
			if _, err := e.fake.Complete(rid, a.decide); err != nil {
				t.Fatal(err)
			}
			decided = true
			by, moved = tryExits(t, e, o.ID, cur.Status, backgroundFirst)
		}
		if !moved {
			t.Fatalf("%s: state %s has no way out (path %s)", a.name, cur.Status, strings.Join(path, " -> "))
		}
		path[len(path)-1] += " [" + by + "]"
	}
	t.Logf("%s: %s", a.name, strings.Join(path, " -> "))
	if got := path[len(path)-1]; got != string(a.want) {
		t.Fatalf("%s: ended %s, want %s (path %s)", a.name, got, a.want, strings.Join(path, " -> "))
	}
	if e.fake.Charges(rid) > 1 {
		t.Fatalf("%s: %d charges", a.name, e.fake.Charges(rid))
	}
	if v, err := store.CheckInvariants(ctx, e.pool); err != nil || len(v) > 0 {
		t.Fatalf("%s: invariants %v, %v", a.name, v, err)
	}
}

// tryExits tries every exit in turn until one moves the order out of from:
// the API's first, or last when backgroundFirst.
func tryExits(t *testing.T, e *env, orderID string, from store.Status, backgroundFirst bool) (string, bool) {
	ctx := context.Background()
	exits := lifecycleExits(t)
	if backgroundFirst {
		slices.Reverse(exits)
	}
	for _, x := range exits {
		_ = x.run(ctx, e, orderID) // a refusal is an answer too: the state tells
		o, err := e.st.GetOrder(ctx, orderID)
		if err != nil {
			t.Fatal(err)
		}
		if o.Status != from {
			return x.name, true
		}
	}
	return "", false
}

// placeOf places a new CREATED order of one unit of product.
func placeOf(t *testing.T, e *env, product string) store.Order {
	t.Helper()
	e.keys++
	res, err := e.st.PlaceCarts(context.Background(), []store.Cart{{
		Order: store.OrderRequest{UserID: "u1001", IdempotencyKey: request.MustKey(fmt.Sprintf("walk-%03d", e.keys)),
			Fingerprint: "fp", Quantity: 1, OrderID: fmt.Sprintf("ord_walk_%03d", e.keys)},
		Lines: []store.CartLine{{ProductID: product, Quantity: 1, Fence: int64(e.keys)}},
		Snapshot: func(o store.Outcome) store.Snapshot {
			if o.Kind == store.OutcomeOrder {
				return store.Snapshot{Status: 201, Body: []byte(`{}`)}
			}
			return store.Snapshot{Status: 409, Body: []byte(`{}`)}
		},
	}})
	if err == nil {
		err = res[0].Err
	}
	out := store.Outcome{}
	if len(res) > 0 {
		out = res[0].Outcome
	}
	if err != nil {
		t.Fatal(err)
	}
	return out.Order
}

// testRejectedChargeFailsForGood: a charge the provider refuses as invalid
// is never retried: the payment ends FAILED with the refusal as its reason,
// at Pay or at the reconciler's re-charge, and the order leaves by cancel.
func testRejectedChargeFailsForGood(t *testing.T, srv pgServer) {
	t.Run("AtPay", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := context.Background()
		o := e.order(t)
		rid := payment.RequestID(o.ID)
		e.fake.Inject(rid, fakepay.FaultReject, 1)
		got, err := e.svc.Pay(ctx, o.ID)
		var fe *payment.FailedError
		if !errors.As(err, &fe) || !fe.Rejected || !errors.Is(err, payment.ErrRejected) || !errors.Is(err, payment.ErrDeclined) {
			t.Fatalf("Pay = %+v, %v; want a rejected FailedError", got, err)
		}
		if got.Status != store.StatusPaymentFailed || !strings.Contains(fe.Reason, "refused as invalid") {
			t.Fatalf("order %s, reason %q", got.Status, fe.Reason)
		}
		p, err := e.st.GetPayment(ctx, rid)
		if err != nil || p.Status != store.PaymentFailed || p.Reason != fe.Reason {
			t.Fatalf("payment %+v, %v", p, err)
		}
		// Nothing is left for the reconciler, and a second pay sends
		// nothing and says why.
		e.age(t)
		if rep, err := e.svc.Reconcile(ctx, 0); err != nil || rep.Examined != 0 {
			t.Fatalf("Reconcile = %+v, %v", rep, err)
		}
		if _, err := e.svc.Pay(ctx, o.ID); !errors.As(err, &fe) || fe.Reason != p.Reason {
			t.Fatalf("second Pay: %v", err)
		}
		if n := e.fake.Calls(rid); n != 1 {
			t.Fatalf("%d calls, want 1", n)
		}
	})
	t.Run("AtReconcile", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := context.Background()
		o := e.order(t)
		rid := payment.RequestID(o.ID)
		e.fake.Inject(rid, fakepay.FaultDrop, 1)
		e.fake.Inject(rid, fakepay.FaultReject, 1)
		if _, err := e.svc.Pay(ctx, o.ID); !errors.Is(err, payment.ErrPending) {
			t.Fatalf("Pay: %v", err)
		}
		if p, _ := e.st.GetPayment(ctx, rid); p.Reason != payment.ReasonNoAnswer {
			t.Fatalf("pending payment's reason %q, want %q", p.Reason, payment.ReasonNoAnswer)
		}
		e.age(t)
		rep, err := e.svc.Reconcile(ctx, 0)
		if err != nil || rep.Failed != 1 || rep.Rejected != 1 || len(rep.Open) != 0 {
			t.Fatalf("Reconcile = %+v, %v", rep, err)
		}
		if os, ps := e.status(t, o.ID); os != store.StatusPaymentFailed || ps != store.PaymentFailed {
			t.Fatalf("order %s payment %s", os, ps)
		}
	})
}

// testOpenPaymentsSayWhy: a payment left open carries its reason, in the
// PendingError of Pay, on the payment row, and in the reconciler's report.
func testOpenPaymentsSayWhy(t *testing.T, srv pgServer) {
	t.Parallel()
	e := newEnv(t, srv)
	ctx := context.Background()
	o := e.order(t)
	rid := payment.RequestID(o.ID)
	e.fake.PendNext(rid)
	_, err := e.svc.Pay(ctx, o.ID)
	var pe *payment.PendingError
	if !errors.As(err, &pe) || pe.Reason != payment.ReasonProviderDeciding {
		t.Fatalf("Pay: %v (reason %q)", err, pe.Reason)
	}
	// Another pay meanwhile reports the recorded reason.
	if _, err := e.svc.Pay(ctx, o.ID); !errors.As(err, &pe) || pe.Reason != payment.ReasonProviderDeciding {
		t.Fatalf("second Pay: %v", err)
	}
	e.age(t)
	rep, err := e.svc.Reconcile(ctx, 0)
	if err != nil || rep.Pending != 1 || len(rep.Open) != 1 {
		t.Fatalf("Reconcile = %+v, %v", rep, err)
	}
	if op := rep.Open[0]; op.RequestID != rid || op.Reason != payment.ReasonProviderDeciding || op.Attempts != 1 || op.Err != nil {
		t.Fatalf("open payment %+v", op)
	}
	// The provider becomes unreachable: the reason follows.
	e.fake.SetLatency(time.Hour)
	short, err := payment.NewService(e.st, e.fake, payment.WithCallTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	e.age(t)
	rep, err = short.Reconcile(ctx, 0)
	if err == nil || len(rep.Open) != 1 || rep.Open[0].Reason != payment.ReasonQueryFailed || rep.Open[0].Err == nil {
		t.Fatalf("Reconcile with the provider away = %+v, %v", rep, err)
	}
	if p, _ := e.st.GetPayment(ctx, rid); p.Reason != payment.ReasonQueryFailed || p.Status != store.PaymentPending {
		t.Fatalf("payment %+v", p)
	}
}

// testFreeOrderIsPaidWithoutACharge: an order of amount zero is PAID by
// Pay without reaching the provider, and one whose Pay died before
// settling is settled by the reconciler the same way.
func testFreeOrderIsPaidWithoutACharge(t *testing.T, srv pgServer) {
	t.Parallel()
	e := newEnv(t, srv)
	ctx := context.Background()
	if err := e.st.SeedProduct(ctx, "free", 10, 0); err != nil {
		t.Fatal(err)
	}
	o := placeOf(t, e, "free")
	got, err := e.svc.Pay(ctx, o.ID)
	if err != nil || got.Status != store.StatusPaid || got.AmountCents != 0 {
		t.Fatalf("Pay(free) = %+v, %v", got, err)
	}
	p, err := e.st.GetPayment(ctx, payment.RequestID(o.ID))
	if err != nil || p.Status != store.PaymentSucceeded || p.Reason != store.ReasonFree {
		t.Fatalf("payment %+v, %v", p, err)
	}
	// A crash after BeginPayment: the reconciler settles it, no charge.
	o2 := placeOf(t, e, "free")
	if _, err := e.st.BeginPayment(ctx, o2.ID, payment.RequestID(o2.ID)); err != nil {
		t.Fatal(err)
	}
	e.age(t)
	rep, err := e.svc.Reconcile(ctx, 0)
	if err != nil || rep.Paid != 1 || rep.Recharged != 0 {
		t.Fatalf("Reconcile = %+v, %v", rep, err)
	}
	if n := e.fake.TotalCharges() + e.fake.Calls(payment.RequestID(o.ID)) + e.fake.Calls(payment.RequestID(o2.ID)); n != 0 {
		t.Fatalf("the provider saw %d calls or charges for free orders", n)
	}
	// The store refuses to settle a priced payment as free.
	o3 := e.order(t)
	if _, err := e.st.BeginPayment(ctx, o3.ID, payment.RequestID(o3.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.SettleFree(ctx, payment.RequestID(o3.ID)); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("SettleFree(priced) = %v, want ErrInvalid", err)
	}
	if os, ps := e.status(t, o3.ID); os != store.StatusPaying || ps != store.PaymentPending {
		t.Fatalf("priced order %s payment %s after a refused SettleFree", os, ps)
	}
}

// testOverHTTP pays through the HTTP provider and fakepay, as ordersd
// does: a free order is PAID without a request, and a charge the provider
// answers 400 fails for good, with its reason, instead of staying PAYING
// while every reconcile round fails again.
func testOverHTTP(t *testing.T, srv pgServer) {
	t.Parallel()
	b := newHTTPBed(t)
	e := newEnv(t, srv)
	ctx := context.Background()
	svc, err := payment.NewService(e.st, b.provider(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.st.SeedProduct(ctx, "free", 10, 0); err != nil {
		t.Fatal(err)
	}
	free := placeOf(t, e, "free")
	if got, err := svc.Pay(ctx, free.ID); err != nil || got.Status != store.StatusPaid {
		t.Fatalf("Pay(free) = %s, %v; want PAID", got.Status, err)
	}
	if b.count() != 0 {
		t.Fatalf("a free order sent %d requests to the provider", b.count())
	}

	priced := e.order(t)
	if err := b.fp.Inject(payment.RequestID(priced.ID), fakepay.FaultReject, 1); err != nil {
		t.Fatal(err)
	}
	got, err := svc.Pay(ctx, priced.ID)
	if !errors.Is(err, payment.ErrRejected) || got.Status != store.StatusPaymentFailed {
		t.Fatalf("Pay(rejected) = %s, %v; want PAYMENT_FAILED and ErrRejected", got.Status, err)
	}
	p, err := e.st.GetPayment(ctx, payment.RequestID(priced.ID))
	if err != nil || p.Status != store.PaymentFailed || !strings.Contains(p.Reason, "400") {
		t.Fatalf("payment %+v, %v", p, err)
	}
	e.age(t)
	if rep, err := svc.Reconcile(ctx, 0); err != nil || rep.Examined != 0 {
		t.Fatalf("Reconcile = %+v, %v; want nothing left", rep, err)
	}
	if _, err := e.st.Cancel(ctx, priced.ID); err != nil {
		t.Fatalf("cancel the failed order: %v", err)
	}
}
