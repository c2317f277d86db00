package fakepay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quorumlock/quorumlock/internal/wait"
	"github.com/quorumlock/quorumlock/orders/payment"
)

// WithLatency delays every in-process Charge and Query by d before the
// provider sees it. A context that ends during the delay aborts the call:
// the request never arrives. A d below 0 counts as 0.
func WithLatency(d time.Duration) Option {
	return func(c *config) error { c.latency = max(d, 0); return nil }
}

// SetLatency changes the delay of later in-process calls.
func (s *Server) SetLatency(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latency = max(d, 0)
}

// Charge implements [payment.Provider] in process: the charge request of
// POST /charges, with the same faults. A lost request or reply returns an
// error matching [payment.ErrTimeout]; a refusal (a bad request, an
// injected [FaultReject], a key reused with another order or amount), one
// matching [payment.ErrRejected].
func (s *Server) Charge(ctx context.Context, req payment.ChargeRequest) (payment.Result, error) {
	key := req.PaymentRequestID
	if !validKey(key) || req.AmountCents <= 0 {
		return payment.Result{}, payment.Reject(fmt.Sprintf("fake provider: charge %q of %d cents: want an id and a positive amount", key, req.AmountCents))
	}
	if err := s.delay(ctx); err != nil {
		return payment.Result{}, err
	}
	res, err := s.charge(key, req.OrderID, req.AmountCents)
	switch {
	case res.fault == FaultDrop:
		return payment.Result{}, fmt.Errorf("fake provider: charge %s: request lost: %w", key, payment.ErrTimeout)
	case errors.Is(err, ErrInvalid):
		return payment.Result{}, payment.Reject("fake provider: charge " + key + " refused as invalid")
	case errors.Is(err, ErrMismatch):
		return payment.Result{}, payment.Reject(err.Error())
	case err != nil:
		return payment.Result{}, err
	case res.fault == FaultLoseReply:
		return payment.Result{}, fmt.Errorf("fake provider: charge %s: reply lost: %w", key, payment.ErrTimeout)
	}
	return payment.Result{Status: res.charge.Status, ProviderRef: res.charge.ProviderRef}, nil
}

// Query implements [payment.Provider] in process: GET /charges/{key}, with
// [payment.StatusNotFound] for a key without a charge.
func (s *Server) Query(ctx context.Context, paymentRequestID string) (payment.Result, error) {
	if paymentRequestID == "" {
		return payment.Result{}, fmt.Errorf("%w: empty payment request id", payment.ErrInvalid)
	}
	if err := s.delay(ctx); err != nil {
		return payment.Result{}, err
	}
	c, err := s.Lookup(paymentRequestID)
	if errors.Is(err, ErrNotFound) {
		return payment.Result{Status: payment.StatusNotFound}, nil
	}
	if err != nil {
		return payment.Result{}, err
	}
	return payment.Result{Status: c.Status, ProviderRef: c.ProviderRef}, nil
}

// delay plays the in-process latency, or returns early when ctx ends.
func (s *Server) delay(ctx context.Context) error {
	s.mu.Lock()
	d := s.latency
	s.mu.Unlock()
	if d <= 0 {
		return ctx.Err()
	}
	if err := wait.Sleep(ctx, d); err != nil {
		return fmt.Errorf("fake provider: %w (%w)", payment.ErrTimeout, err)
	}
	return nil
}

// Charges returns how many times money moved for the key: 1 once its
// charge has SUCCEEDED, else 0. An idempotent provider never goes above 1.
func (s *Server) Charges(key string) int {
	if c, err := s.Lookup(key); err == nil && c.Status == payment.StatusSucceeded {
		return 1
	}
	return 0
}

// TotalCharges returns how many times money moved, over all keys.
func (s *Server) TotalCharges() int { return s.Stats().Charges }

// Calls returns how many charge requests with the key reached the
// provider, duplicates and refusals included (dropped ones are not
// counted).
func (s *Server) Calls(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.received[key]
}

// FailNext makes the next charge of key ([AnyKey] for any) a decline.
func (s *Server) FailNext(key string) error { return s.Inject(key, FaultDecline, 1) }

// LoseReplyNext makes the next charge of key ([AnyKey] for any) happen but
// lose its answer: the "charged, then the reply was lost" case.
func (s *Server) LoseReplyNext(key string) error { return s.Inject(key, FaultLoseReply, 1) }

// DropNext makes the next charge request of key ([AnyKey] for any) get
// lost before it reaches the provider.
func (s *Server) DropNext(key string) error { return s.Inject(key, FaultDrop, 1) }

// PendNext makes the next new charge of key ([AnyKey] for any) stay
// PENDING until [Server.Complete].
func (s *Server) PendNext(key string) error { return s.Inject(key, FaultPending, 1) }
