package payment

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quorumlock/quorumlock/internal/failpoint"
	"github.com/quorumlock/quorumlock/orders/store"
)

// Store is what the Service needs from the orders store; *store.Store
// satisfies it.
type Store interface {
	BeginPayment(ctx context.Context, orderID, requestID string) (store.PaymentStart, error)
	SettlePayment(ctx context.Context, requestID string, status store.PaymentStatus, providerRef string) (store.Order, error)
	ClaimPendingPayments(ctx context.Context, olderThan time.Duration, limit int) ([]store.Payment, error)
	ApplyPaymentEvent(ctx context.Context, ev store.PaymentEvent) (store.Order, bool, error)
}

// Defaults of the Service options.
const (
	DefaultCallTimeout    = 10 * time.Second
	DefaultSettleTimeout  = 10 * time.Second
	DefaultReconcileBatch = 100
)

// Service pays orders and reconciles payments whose outcome is unknown. It
// is safe for concurrent use, also from several processes on one database.
type Service struct {
	store         Store
	provider      Provider
	callTimeout   time.Duration
	settleTimeout time.Duration
	batch         int
	failpoints    *failpoint.Set
}

// Option configures [NewService].
type Option func(*Service) error

// WithCallTimeout bounds each provider call (default [DefaultCallTimeout]).
// A call that runs out of time counts as an unknown outcome.
func WithCallTimeout(d time.Duration) Option {
	return func(s *Service) error {
		if d <= 0 {
			return fmt.Errorf("%w: call timeout %v", ErrInvalid, d)
		}
		s.callTimeout = d
		return nil
	}
}

// WithSettleTimeout bounds the recording of a provider's answer (default
// [DefaultSettleTimeout]). The recording runs even when the caller's
// context has ended, because money may already have moved.
func WithSettleTimeout(d time.Duration) Option {
	return func(s *Service) error {
		if d <= 0 {
			return fmt.Errorf("%w: settle timeout %v", ErrInvalid, d)
		}
		s.settleTimeout = d
		return nil
	}
}

// WithReconcileBatch sets how many payments one Reconcile call examines at
// most (default [DefaultReconcileBatch], at most store.MaxPendingBatch).
func WithReconcileBatch(n int) Option {
	return func(s *Service) error {
		if n < 1 || n > store.MaxPendingBatch {
			return fmt.Errorf("%w: reconcile batch %d is outside 1..%d", ErrInvalid, n, store.MaxPendingBatch)
		}
		s.batch = n
		return nil
	}
}

// WithFailpoints arms the crash points of fp in Pay, for drills (see
// internal/failpoint: only a build with the failpoints tag can arm any). A
// nil Set, the default, arms none.
func WithFailpoints(fp *failpoint.Set) Option {
	return func(s *Service) error { s.failpoints = fp; return nil }
}

// NewService returns a Service that records payments in st and charges
// through p.
func NewService(st Store, p Provider, opts ...Option) (*Service, error) {
	if st == nil || p == nil {
		return nil, fmt.Errorf("%w: nil store or provider", ErrInvalid)
	}
	s := &Service{
		store:         st,
		provider:      p,
		callTimeout:   DefaultCallTimeout,
		settleTimeout: DefaultSettleTimeout,
		batch:         DefaultReconcileBatch,
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Pay charges order orderID once. It moves the order CREATED -> PAYING and
// records a PENDING payment with request id [RequestID](orderID), then
// sends the charge with that id:
//
//   - success: the order is PAID and is returned with a nil error;
//   - definite decline: the order is PAYMENT_FAILED and the error wraps
//     [ErrDeclined];
//   - no reply, an error or a PENDING answer: the order stays PAYING and
//     the error is a [*PendingError] (matching [ErrPending]); Reconcile
//     settles it later with the same request id.
//
// Pay is idempotent: a PAID order is returned with a nil error and a
// PAYMENT_FAILED one with ErrDeclined, without calling the provider, and
// when the order is already PAYING (another Pay is in flight, or its
// outcome is pending) Pay sends nothing and returns a *PendingError. A
// CANCELLED order gives store.ErrInvalidTransition, an unknown one
// store.ErrNotFound. With the error, the order is returned as it is when
// it is known.
func (s *Service) Pay(ctx context.Context, orderID string) (store.Order, error) {
	rid := RequestID(orderID)
	start, err := s.store.BeginPayment(ctx, orderID, rid)
	if err != nil {
		var te *store.TransitionError
		if errors.As(err, &te) {
			switch te.Current {
			case store.StatusPaid:
				return start.Order, nil
			case store.StatusPaymentFailed:
				return start.Order, fmt.Errorf("%w: order %s", ErrDeclined, orderID)
			}
		}
		return start.Order, fmt.Errorf("payment: pay order %s: %w", orderID, err)
	}
	if !start.Started {
		return start.Order, &PendingError{OrderID: orderID, PaymentRequestID: rid}
	}
	s.failpoints.Hit(failpoint.AfterPaymentBegin)

	cctx, cancel := context.WithTimeout(ctx, s.callTimeout)
	res, err := s.provider.Charge(cctx, ChargeRequest{
		PaymentRequestID: rid,
		OrderID:          orderID,
		AmountCents:      start.Payment.AmountCents,
	})
	cancel()
	if err != nil {
		return start.Order, &PendingError{OrderID: orderID, PaymentRequestID: rid, Cause: err}
	}
	s.failpoints.Hit(failpoint.AfterCharge)
	o, settled, err := s.settle(ctx, rid, res)
	s.failpoints.Hit(failpoint.AfterSettle)
	switch {
	case err != nil:
		return start.Order, &PendingError{OrderID: orderID, PaymentRequestID: rid, Cause: err}
	case !settled:
		return start.Order, &PendingError{OrderID: orderID, PaymentRequestID: rid}
	case o.Status == store.StatusPaymentFailed:
		return o, fmt.Errorf("%w: order %s", ErrDeclined, orderID)
	}
	return o, nil
}

// settle records a final provider answer. settled is false when the answer
// is not final (PENDING, NOT_FOUND or unknown).
func (s *Service) settle(ctx context.Context, rid string, res Result) (o store.Order, settled bool, err error) {
	var st store.PaymentStatus
	switch res.Status {
	case StatusSucceeded:
		st = store.PaymentSucceeded
	case StatusFailed:
		st = store.PaymentFailed
	default:
		return store.Order{}, false, nil
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.settleTimeout)
	defer cancel()
	o, err = s.store.SettlePayment(sctx, rid, st, res.ProviderRef)
	if err != nil {
		return store.Order{}, false, fmt.Errorf("payment: record %s for %s: %w", res.Status, rid, err)
	}
	return o, true, nil
}

// ReconcileReport counts what one Reconcile call did.
type ReconcileReport struct {
	// Examined is the number of pending payments looked at.
	Examined int
	// Paid and Failed count payments settled as PAID and PAYMENT_FAILED.
	Paid, Failed int
	// Pending counts payments the provider has no final answer for yet.
	Pending int
	// Recharged counts charges sent again (with the same request id)
	// because the provider had never received them.
	Recharged int
	// Errors counts payments left as they were because a call failed.
	Errors int
}

// Reconcile settles payments of orders stuck in PAYING whose last attempt
// is at least olderThan old, and never younger than the provider call
// timeout (WithCallTimeout): a charge still in flight is left alone. It
// takes at most the configured batch size per call, oldest first.
//
// The payments are claimed in the database (FOR UPDATE SKIP LOCKED, and
// the claim restarts their age), so reconcilers on several instances never
// work the same payment at once. For each, it queries the provider with the
// payment's request id and records a final answer (PAID or
// PAYMENT_FAILED). When the provider has never seen the id, the charge did
// not reach it, and Reconcile sends it again with the same id: the
// provider's idempotency guarantees that money moves at most once even if
// the first charge surfaces later. Payments still without a final answer
// wait for a later round.
//
// The error joins the per-payment failures, which are also counted in the
// report; the other payments of the batch are still processed. Reconcile
// stops early, with the context's error, when ctx ends.
func (s *Service) Reconcile(ctx context.Context, olderThan time.Duration) (ReconcileReport, error) {
	var rep ReconcileReport
	pending, err := s.store.ClaimPendingPayments(ctx, max(olderThan, s.callTimeout), s.batch)
	if err != nil {
		return rep, fmt.Errorf("payment: reconcile: %w", err)
	}
	var errs []error
	for _, p := range pending {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		rep.Examined++
		if err := s.reconcileOne(ctx, p, &rep); err != nil {
			rep.Errors++
			errs = append(errs, err)
		}
	}
	return rep, errors.Join(errs...)
}

// Event is a provider's callback about a payment request, once its
// signature was checked.
type Event struct {
	// ID is the provider's unique event id: a callback delivered several
	// times carries the same one.
	ID               string `json:"event_id"`
	PaymentRequestID string `json:"payment_request_id"`
	Status           Status `json:"status"`
	ProviderRef      string `json:"provider_ref"`
}

// ErrEventRejected reports a callback that was refused and changed nothing:
// unknown payment, a status that contradicts the settled one, an event id
// reused with other content, or bad content. It is joined with the store's
// reason.
var ErrEventRejected = errors.New("payment: callback rejected")

// ApplyEvent settles the payment a provider callback reports, exactly once
// per event id (see [store.Store.ApplyPaymentEvent]): a replayed callback
// returns the order with applied false and changes nothing. Only
// SUCCEEDED and FAILED settle; other statuses are rejected.
func (s *Service) ApplyEvent(ctx context.Context, ev Event) (o store.Order, applied bool, err error) {
	var st store.PaymentStatus
	switch ev.Status {
	case StatusSucceeded:
		st = store.PaymentSucceeded
	case StatusFailed:
		st = store.PaymentFailed
	default:
		return store.Order{}, false, fmt.Errorf("%w: %w: status %q does not settle a payment", ErrEventRejected, store.ErrInvalid, ev.Status)
	}
	o, applied, err = s.store.ApplyPaymentEvent(ctx, store.PaymentEvent{EventID: ev.ID, RequestID: ev.PaymentRequestID, Status: st, ProviderRef: ev.ProviderRef})
	if err != nil {
		return o, false, fmt.Errorf("%w: event %q: %w", ErrEventRejected, ev.ID, err)
	}
	return o, applied, nil
}

func (s *Service) reconcileOne(ctx context.Context, p store.Payment, rep *ReconcileReport) error {
	cctx, cancel := context.WithTimeout(ctx, s.callTimeout)
	res, err := s.provider.Query(cctx, p.RequestID)
	cancel()
	if err != nil {
		return fmt.Errorf("payment: reconcile %s: query: %w", p.RequestID, err)
	}
	if res.Status == StatusNotFound {
		cctx, cancel := context.WithTimeout(ctx, s.callTimeout)
		res, err = s.provider.Charge(cctx, ChargeRequest{
			PaymentRequestID: p.RequestID,
			OrderID:          p.OrderID,
			AmountCents:      p.AmountCents,
		})
		cancel()
		rep.Recharged++
		if err != nil {
			return fmt.Errorf("payment: reconcile %s: charge again: %w", p.RequestID, err)
		}
	}
	o, settled, err := s.settle(ctx, p.RequestID, res)
	switch {
	case err != nil:
		return err
	case !settled:
		rep.Pending++ // the claim restarted its age: a later round asks again
	case o.Status == store.StatusPaid:
		rep.Paid++
	default:
		rep.Failed++
	}
	return nil
}

// RunReconciler calls Reconcile every interval until ctx ends, and passes
// each report and error to report (which may be nil). It returns ctx's
// error. It runs on the caller's goroutine.
func (s *Service) RunReconciler(ctx context.Context, interval, olderThan time.Duration, report func(ReconcileReport, error)) error {
	if interval <= 0 {
		return fmt.Errorf("%w: reconcile interval %v", ErrInvalid, interval)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			rep, err := s.Reconcile(ctx, olderThan)
			if report != nil && ctx.Err() == nil {
				report(rep, err)
			}
		}
	}
}
