package payment_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/devtools/fakepay"
	"github.com/quorumlock/quorumlock/devtools/storetest"
	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/orders/payment"
	"github.com/quorumlock/quorumlock/orders/request"
	"github.com/quorumlock/quorumlock/orders/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// pgServer is the bed's Postgres, which hands out fresh databases.
type pgServer = *testbed.PostgresNode

type env struct {
	pool *pgxpool.Pool
	st   *store.Store
	fake *fakepay.Server
	svc  *payment.Service
	keys int
}

func newEnv(t *testing.T, srv pgServer, opts ...payment.Option) *env {
	t.Helper()
	ctx := context.Background()
	db := storetest.New(t, srv)
	pool, st := db.Pool, db.Store
	if err := st.SeedProduct(ctx, "42", 100, 1999); err != nil {
		t.Fatal(err)
	}
	fake := newFake(t)
	svc, err := payment.NewService(st, fake, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return &env{pool: pool, st: st, fake: fake, svc: svc}
}

// newFake is an in-process fake provider.
func newFake(t *testing.T) *fakepay.Server {
	t.Helper()
	f, err := fakepay.New()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// order places a new CREATED order for product 42.
func (e *env) order(t *testing.T) store.Order {
	t.Helper()
	e.keys++
	res, err := e.st.PlaceCarts(context.Background(), []store.Cart{{
		Order: store.OrderRequest{UserID: "u1001", IdempotencyKey: request.MustKey(fmt.Sprintf("req-%03d", e.keys)),
			Fingerprint: "fp", Quantity: 1, OrderID: fmt.Sprintf("ord_%03d", e.keys)},
		Lines: []store.CartLine{{ProductID: "42", Quantity: 1, Fence: int64(e.keys)}},
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

// age makes every pending payment's last attempt an hour old, as if the
// provider call timeout had long passed.
func (e *env) age(t *testing.T) {
	t.Helper()
	if _, err := e.pool.Exec(context.Background(), `UPDATE payments SET updated_at = now() - interval '1 hour' WHERE status = 'PENDING'`); err != nil {
		t.Fatal(err)
	}
}

func (e *env) status(t *testing.T, orderID string) (store.Status, store.PaymentStatus) {
	t.Helper()
	o, err := e.st.GetOrder(context.Background(), orderID)
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.st.GetPayment(context.Background(), payment.RequestID(orderID))
	if errors.Is(err, store.ErrNotFound) {
		return o.Status, ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return o.Status, p.Status
}

// TestPostgres runs every test that needs a real server on one bed; each
// subtest gets its own database.
func TestPostgres(t *testing.T) {
	srv := startPostgres(t)

	t.Run("EveryStateHasAWayOut", func(t *testing.T) { testEveryStateHasAWayOut(t, srv) })
	t.Run("RejectedChargeFailsForGood", func(t *testing.T) { testRejectedChargeFailsForGood(t, srv) })
	t.Run("OpenPaymentsSayWhy", func(t *testing.T) { testOpenPaymentsSayWhy(t, srv) })
	t.Run("FreeOrderIsPaidWithoutACharge", func(t *testing.T) { testFreeOrderIsPaidWithoutACharge(t, srv) })
	t.Run("OverHTTP", func(t *testing.T) { testOverHTTP(t, srv) })

	t.Run("HappyPath", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := context.Background()
		o := e.order(t)
		paid, err := e.svc.Pay(ctx, o.ID)
		if err != nil || paid.Status != store.StatusPaid {
			t.Fatalf("Pay = %+v, %v", paid, err)
		}
		rid := payment.RequestID(o.ID)
		p, err := e.st.GetPayment(ctx, rid)
		if err != nil || p.Status != store.PaymentSucceeded || p.ProviderRef == "" || p.AmountCents != 1999 {
			t.Fatalf("payment %+v, %v", p, err)
		}
		// Paying again answers from the order: no second call.
		again, err := e.svc.Pay(ctx, o.ID)
		if err != nil || again.Status != store.StatusPaid {
			t.Fatalf("second Pay = %+v, %v", again, err)
		}
		if e.fake.Calls(rid) != 1 || e.fake.Charges(rid) != 1 {
			t.Fatalf("calls %d charges %d", e.fake.Calls(rid), e.fake.Charges(rid))
		}
	})

	t.Run("ProviderDeclines", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := context.Background()
		o := e.order(t)
		e.fake.FailNext(payment.RequestID(o.ID))
		got, err := e.svc.Pay(ctx, o.ID)
		if !errors.Is(err, payment.ErrDeclined) || got.Status != store.StatusPaymentFailed {
			t.Fatalf("Pay = %+v, %v; want PAYMENT_FAILED and ErrDeclined", got, err)
		}
		if os, ps := e.status(t, o.ID); os != store.StatusPaymentFailed || ps != store.PaymentFailed {
			t.Fatalf("order %s payment %s", os, ps)
		}
		if _, err := e.svc.Pay(ctx, o.ID); !errors.Is(err, payment.ErrDeclined) {
			t.Fatalf("second Pay: %v", err)
		}
		if n := e.fake.Calls(payment.RequestID(o.ID)); n != 1 {
			t.Fatalf("%d calls", n)
		}
	})

	t.Run("ChargedButReplyLost", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := context.Background()
		o := e.order(t)
		rid := payment.RequestID(o.ID)
		e.fake.LoseReplyNext(rid)
		got, err := e.svc.Pay(ctx, o.ID)
		var pe *payment.PendingError
		if !errors.As(err, &pe) || !errors.Is(err, payment.ErrPending) || !errors.Is(err, payment.ErrTimeout) || pe.PaymentRequestID != rid {
			t.Fatalf("Pay err %v, want a PendingError caused by ErrTimeout", err)
		}
		if got.Status != store.StatusPaying {
			t.Fatalf("order %s, want PAYING", got.Status)
		}
		// A retry of Pay does not charge again while the outcome is open.
		if _, err := e.svc.Pay(ctx, o.ID); !errors.Is(err, payment.ErrPending) {
			t.Fatalf("retry: %v", err)
		}
		// A fresh payment is left alone by a reconciler that waits.
		if rep, err := e.svc.Reconcile(ctx, time.Hour); err != nil || rep.Examined != 0 {
			t.Fatalf("Reconcile(1h) = %+v, %v", rep, err)
		}
		// Once the attempt is older than the provider call timeout, the
		// reconciler settles it.
		e.age(t)
		rep, err := e.svc.Reconcile(ctx, 0)
		if err != nil || rep.Paid != 1 || rep.Recharged != 0 {
			t.Fatalf("Reconcile = %+v, %v", rep, err)
		}
		if os, ps := e.status(t, o.ID); os != store.StatusPaid || ps != store.PaymentSucceeded {
			t.Fatalf("order %s payment %s", os, ps)
		}
		if e.fake.Charges(rid) != 1 || e.fake.Calls(rid) != 1 {
			t.Fatalf("charges %d calls %d, want exactly one charge", e.fake.Charges(rid), e.fake.Calls(rid))
		}
		// Nothing left to do.
		if rep, err := e.svc.Reconcile(ctx, 0); err != nil || rep.Examined != 0 {
			t.Fatalf("second Reconcile = %+v, %v", rep, err)
		}
	})

	t.Run("RequestLostBeforeProvider", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := context.Background()
		o := e.order(t)
		rid := payment.RequestID(o.ID)
		e.fake.DropNext(rid)
		if _, err := e.svc.Pay(ctx, o.ID); !errors.Is(err, payment.ErrPending) {
			t.Fatalf("Pay: %v", err)
		}
		// Not re-sent while the first attempt may still be in flight.
		if rep, err := e.svc.Reconcile(ctx, 0); err != nil || rep.Examined != 0 || e.fake.Calls(rid) != 0 {
			t.Fatalf("Reconcile on a fresh attempt = %+v, %v, %d calls", rep, err, e.fake.Calls(rid))
		}
		e.age(t)
		rep, err := e.svc.Reconcile(ctx, 0)
		if err != nil || rep.Paid != 1 || rep.Recharged != 1 {
			t.Fatalf("Reconcile = %+v, %v", rep, err)
		}
		if e.fake.Charges(rid) != 1 {
			t.Fatalf("charges %d", e.fake.Charges(rid))
		}
	})

	t.Run("CrashBetweenBeginAndCharge", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := context.Background()
		o := e.order(t)
		rid := payment.RequestID(o.ID)
		// The process committed PAYING and died before sending the charge.
		if _, err := e.st.BeginPayment(ctx, o.ID, rid); err != nil {
			t.Fatal(err)
		}
		e.age(t)
		// Two reconcilers race on it; the provider sees one charge.
		other, err := payment.NewService(e.st, e.fake)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for _, s := range []*payment.Service{e.svc, other} {
			wg.Go(func() {
				if _, err := s.Reconcile(ctx, 0); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if os, ps := e.status(t, o.ID); os != store.StatusPaid || ps != store.PaymentSucceeded {
			t.Fatalf("order %s payment %s", os, ps)
		}
		if e.fake.Charges(rid) != 1 {
			t.Fatalf("charges %d", e.fake.Charges(rid))
		}
	})

	t.Run("ProviderPendingThenSettles", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := context.Background()
		o := e.order(t)
		rid := payment.RequestID(o.ID)
		e.fake.PendNext(rid)
		if _, err := e.svc.Pay(ctx, o.ID); !errors.Is(err, payment.ErrPending) {
			t.Fatalf("Pay: %v", err)
		}
		e.age(t)
		rep, err := e.svc.Reconcile(ctx, 0)
		if err != nil || rep.Pending != 1 {
			t.Fatalf("Reconcile = %+v, %v", rep, err)
		}
		if p, _ := e.st.GetPayment(ctx, rid); p.Attempts != 1 || p.Status != store.PaymentPending {
			t.Fatalf("payment %+v", p)
		}
		if _, err := e.fake.Complete(rid, payment.StatusFailed); err != nil {
			t.Fatal(err)
		}
		e.age(t)
		rep, err = e.svc.Reconcile(ctx, 0)
		if err != nil || rep.Failed != 1 {
			t.Fatalf("Reconcile = %+v, %v", rep, err)
		}
		if os, ps := e.status(t, o.ID); os != store.StatusPaymentFailed || ps != store.PaymentFailed {
			t.Fatalf("order %s payment %s", os, ps)
		}
	})

	t.Run("ConcurrentPayChargesOnce", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		o := e.order(t)
		rid := payment.RequestID(o.ID)
		e.fake.SetLatency(20 * time.Millisecond) // keep the first charge in flight
		errs := make([]error, 20)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() {
				got, err := e.svc.Pay(context.Background(), o.ID)
				if err == nil && got.Status != store.StatusPaid {
					err = fmt.Errorf("status %s without an error", got.Status)
				}
				if errors.Is(err, payment.ErrPending) {
					err = nil // lost the race while the winner was charging
				}
				errs[i] = err
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		if e.fake.Calls(rid) != 1 || e.fake.Charges(rid) != 1 {
			t.Fatalf("calls %d charges %d, want 1", e.fake.Calls(rid), e.fake.Charges(rid))
		}
		if os, _ := e.status(t, o.ID); os != store.StatusPaid {
			t.Fatalf("order %s", os)
		}
	})

	t.Run("ForbiddenAndUnknown", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := context.Background()
		o := e.order(t)
		if _, err := e.st.Cancel(ctx, o.ID); err != nil {
			t.Fatal(err)
		}
		got, err := e.svc.Pay(ctx, o.ID)
		if !errors.Is(err, store.ErrInvalidTransition) || got.Status != store.StatusCancelled {
			t.Fatalf("Pay(cancelled) = %+v, %v", got, err)
		}
		if e.fake.TotalCharges() != 0 || e.fake.Calls(payment.RequestID(o.ID)) != 0 {
			t.Fatal("a cancelled order reached the provider")
		}
		if _, err := e.svc.Pay(ctx, "ord_nope"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Pay(unknown) = %v", err)
		}
		if _, err := e.svc.Pay(ctx, ""); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("Pay(\"\") = %v", err)
		}
	})

	t.Run("ReconcileBatchIsBounded", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv, payment.WithReconcileBatch(2))
		ctx := context.Background()
		for range 5 {
			o := e.order(t)
			e.fake.LoseReplyNext(payment.RequestID(o.ID))
			if _, err := e.svc.Pay(ctx, o.ID); !errors.Is(err, payment.ErrPending) {
				t.Fatal(err)
			}
		}
		e.age(t)
		for round, want := range []int{2, 2, 1, 0} {
			rep, err := e.svc.Reconcile(ctx, 0)
			if err != nil || rep.Examined != want || rep.Paid != want {
				t.Fatalf("round %d: %+v, %v; want %d examined and paid", round, rep, err, want)
			}
		}
		if e.fake.TotalCharges() != 5 {
			t.Fatalf("%d charges for 5 orders", e.fake.TotalCharges())
		}
	})

	t.Run("ReconcileKeepsGoingAfterAnError", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		ctx := context.Background()
		var ids []string
		for range 2 {
			o := e.order(t)
			if _, err := e.st.BeginPayment(ctx, o.ID, payment.RequestID(o.ID)); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, payment.RequestID(o.ID))
		}
		// Both are unknown to the provider; the first re-charge is lost.
		e.fake.DropNext(fakepay.AnyKey)
		e.age(t)
		rep, err := e.svc.Reconcile(ctx, 0)
		if err == nil || !errors.Is(err, payment.ErrTimeout) || rep.Errors != 1 || rep.Paid != 1 || rep.Recharged != 2 {
			t.Fatalf("Reconcile = %+v, %v", rep, err)
		}
		e.age(t)
		rep, err = e.svc.Reconcile(ctx, 0)
		if err != nil || rep.Paid != 1 {
			t.Fatalf("second Reconcile = %+v, %v", rep, err)
		}
		for _, id := range ids {
			if e.fake.Charges(id) != 1 {
				t.Fatalf("%s charged %d times", id, e.fake.Charges(id))
			}
		}
	})

	t.Run("RunReconcilerStopsWithContext", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, srv)
		o := e.order(t)
		e.fake.LoseReplyNext(payment.RequestID(o.ID))
		if _, err := e.svc.Pay(context.Background(), o.ID); !errors.Is(err, payment.ErrPending) {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() {
			done <- e.svc.RunReconciler(ctx, 10*time.Millisecond, 0, func(rep payment.ReconcileReport, err error) {
				if rep.Paid > 0 {
					cancel()
				}
			})
		}()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("RunReconciler = %v", err)
		}
		if os, _ := e.status(t, o.ID); os != store.StatusPaid {
			t.Fatalf("order %s", os)
		}
		if err := e.svc.RunReconciler(context.Background(), 0, 0, nil); !errors.Is(err, payment.ErrInvalid) {
			t.Fatalf("zero interval: %v", err)
		}
	})
}

func TestNewServiceRejectsBadConfig(t *testing.T) {
	fake := newFake(t)
	if _, err := payment.NewService(nil, fake); !errors.Is(err, payment.ErrInvalid) {
		t.Fatalf("nil store: %v", err)
	}
	for _, o := range []payment.Option{
		payment.WithCallTimeout(0),
		payment.WithSettleTimeout(-1),
		payment.WithReconcileBatch(0),
		payment.WithReconcileBatch(store.MaxPendingBatch + 1),
		nil,
	} {
		if _, err := payment.NewService(&store.Store{}, fake, o); !errors.Is(err, payment.ErrInvalid) {
			t.Errorf("option accepted: %v", err)
		}
	}
	if _, err := payment.NewService(&store.Store{}, fake, payment.WithReconcileBatch(2), nil); err == nil ||
		!strings.Contains(err.Error(), "option 1 is nil") {
		t.Errorf("a nil second option: %v, want an error naming option 1", err)
	}
}

func TestRequestID(t *testing.T) {
	if got := payment.RequestID("ord_1"); got != "ord_1:pay" {
		t.Fatalf("RequestID = %q", got)
	}
}
