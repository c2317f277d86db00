package fakepay_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/devtools/fakepay"
	"github.com/quorumlock/quorumlock/orders/payment"
)

func charge(t *testing.T, f *fakepay.Server, id string) (payment.Result, error) {
	t.Helper()
	return f.Charge(context.Background(), payment.ChargeRequest{PaymentRequestID: id, OrderID: "o", AmountCents: 100})
}

func newFake(t *testing.T, opts ...fakepay.Option) *fakepay.Server {
	t.Helper()
	f, err := fakepay.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func TestNewRefusesNilOption(t *testing.T) {
	f, err := fakepay.New(fakepay.WithLatency(0), nil)
	if !errors.Is(err, fakepay.ErrInvalid) || !strings.Contains(err.Error(), "option 1 is nil") || f != nil {
		t.Fatalf("New(WithLatency(0), nil) = %v, %v; want an error naming option 1", f, err)
	}
}

func TestFakeIsIdempotent(t *testing.T) {
	f := newFake(t)
	first, err := charge(t, f, "o1:pay")
	if err != nil || first.Status != payment.StatusSucceeded || first.ProviderRef == "" {
		t.Fatalf("first charge %+v, %v", first, err)
	}
	again, err := charge(t, f, "o1:pay")
	if err != nil || again != first {
		t.Fatalf("second charge %+v, %v; want the first result %+v", again, err, first)
	}
	if f.Charges("o1:pay") != 1 || f.Calls("o1:pay") != 2 || f.TotalCharges() != 1 {
		t.Fatalf("charges %d calls %d total %d", f.Charges("o1:pay"), f.Calls("o1:pay"), f.TotalCharges())
	}
	q, err := f.Query(context.Background(), "o1:pay")
	if err != nil || q != first {
		t.Fatalf("query %+v, %v", q, err)
	}
	if q, _ := f.Query(context.Background(), "o2:pay"); q.Status != payment.StatusNotFound {
		t.Fatalf("unknown id: %+v", q)
	}
}

func TestFakeFaults(t *testing.T) {
	t.Run("Decline", func(t *testing.T) {
		f := newFake(t)
		f.FailNext("a")
		r, err := charge(t, f, "a")
		if err != nil || r.Status != payment.StatusFailed {
			t.Fatalf("%+v, %v", r, err)
		}
		// The decline is the recorded result of the id.
		if r, _ := charge(t, f, "a"); r.Status != payment.StatusFailed || f.Charges("a") != 0 {
			t.Fatalf("retry %+v, charges %d", r, f.Charges("a"))
		}
	})
	t.Run("LoseReply", func(t *testing.T) {
		f := newFake(t)
		f.LoseReplyNext("a")
		if _, err := charge(t, f, "a"); !errors.Is(err, payment.ErrTimeout) {
			t.Fatalf("err %v, want ErrTimeout", err)
		}
		if f.Charges("a") != 1 {
			t.Fatalf("charges %d: the charge must have happened", f.Charges("a"))
		}
		if q, _ := f.Query(context.Background(), "a"); q.Status != payment.StatusSucceeded {
			t.Fatalf("query %+v", q)
		}
	})
	t.Run("Drop", func(t *testing.T) {
		f := newFake(t)
		f.DropNext("a")
		if _, err := charge(t, f, "a"); !errors.Is(err, payment.ErrTimeout) {
			t.Fatalf("err %v, want ErrTimeout", err)
		}
		if q, _ := f.Query(context.Background(), "a"); q.Status != payment.StatusNotFound || f.Calls("a") != 0 {
			t.Fatalf("query %+v, calls %d", q, f.Calls("a"))
		}
	})
	t.Run("PendingThenComplete", func(t *testing.T) {
		f := newFake(t)
		f.PendNext("a")
		if r, err := charge(t, f, "a"); err != nil || r.Status != payment.StatusPending {
			t.Fatalf("%+v, %v", r, err)
		}
		if f.Charges("a") != 0 {
			t.Fatal("pending charge counted")
		}
		if _, err := f.Complete("a", payment.StatusSucceeded); err != nil {
			t.Fatal(err)
		}
		if q, _ := f.Query(context.Background(), "a"); q.Status != payment.StatusSucceeded || f.Charges("a") != 1 {
			t.Fatalf("query %+v charges %d", q, f.Charges("a"))
		}
		if _, err := f.Complete("a", payment.StatusFailed); !errors.Is(err, fakepay.ErrNotPending) {
			t.Fatalf("completing a settled charge: %v", err)
		}
		if _, err := f.Complete("b", payment.StatusPending); !errors.Is(err, fakepay.ErrInvalid) {
			t.Fatalf("completing as pending: %v", err)
		}
	})
	t.Run("AnyRequestAndOrder", func(t *testing.T) {
		f := newFake(t)
		f.FailNext(fakepay.AnyKey)
		f.LoseReplyNext("b")
		// b's own fault is used first; the any-id fault waits for the next.
		if _, err := charge(t, f, "b"); !errors.Is(err, payment.ErrTimeout) {
			t.Fatalf("b: %v", err)
		}
		if r, _ := charge(t, f, "c"); r.Status != payment.StatusFailed {
			t.Fatalf("c: %+v", r)
		}
		if r, _ := charge(t, f, "d"); r.Status != payment.StatusSucceeded {
			t.Fatalf("d: %+v (faults must be used once)", r)
		}
	})
	t.Run("Reject", func(t *testing.T) {
		f := newFake(t)
		if err := f.Inject("a", fakepay.FaultReject, 1); err != nil {
			t.Fatal(err)
		}
		_, err := charge(t, f, "a")
		if !errors.Is(err, payment.ErrRejected) || !strings.Contains(err.Error(), "refused as invalid") {
			t.Fatalf("err %v, want a refusal", err)
		}
		// The refused request reached the provider: it is counted, and
		// nothing is recorded.
		if f.Calls("a") != 1 || f.Charges("a") != 0 || f.Stats().Requests != 1 {
			t.Fatalf("calls %d charges %d requests %d", f.Calls("a"), f.Charges("a"), f.Stats().Requests)
		}
		if q, _ := f.Query(context.Background(), "a"); q.Status != payment.StatusNotFound {
			t.Fatalf("query %+v", q)
		}
	})
	t.Run("KeyReusedIsRefused", func(t *testing.T) {
		f := newFake(t)
		if _, err := charge(t, f, "a"); err != nil {
			t.Fatal(err)
		}
		_, err := f.Charge(context.Background(), payment.ChargeRequest{PaymentRequestID: "a", OrderID: "other", AmountCents: 100})
		if !errors.Is(err, payment.ErrRejected) {
			t.Fatalf("err %v, want a refusal", err)
		}
	})
	t.Run("BadRequest", func(t *testing.T) {
		f := newFake(t)
		if _, err := f.Charge(context.Background(), payment.ChargeRequest{}); !errors.Is(err, payment.ErrInvalid) {
			t.Fatalf("empty id: %v", err)
		}
		if _, err := f.Query(context.Background(), ""); !errors.Is(err, payment.ErrInvalid) {
			t.Fatalf("empty id: %v", err)
		}
	})
}

func TestFakeLatencyHonoursContext(t *testing.T) {
	f := newFake(t, fakepay.WithLatency(time.Hour))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := f.Charge(ctx, payment.ChargeRequest{PaymentRequestID: "a", OrderID: "o", AmountCents: 1}); !errors.Is(err, payment.ErrTimeout) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	if f.Calls("a") != 0 || f.Charges("a") != 0 {
		t.Fatal("a request cut off during its latency reached the provider")
	}
	f.SetLatency(time.Millisecond)
	if _, err := charge(t, f, "a"); err != nil {
		t.Fatal(err)
	}
}

func TestFakeConcurrentCharges(t *testing.T) {
	f := newFake(t)
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if _, err := f.Charge(context.Background(), payment.ChargeRequest{PaymentRequestID: "x", AmountCents: 1}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if f.Charges("x") != 1 || f.Calls("x") != 50 {
		t.Fatalf("charges %d calls %d", f.Charges("x"), f.Calls("x"))
	}
}
