package payment

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/internal/failpoint"
	"github.com/quorumlock/quorumlock/internal/option"
	"github.com/quorumlock/quorumlock/orders/store"
)

// Store is what the Service needs from the orders store; *store.Store
// satisfies it.
type Store interface {
	BeginPayment(ctx context.Context, orderID, requestID string) (store.PaymentStart, error)
	SettlePayment(ctx context.Context, requestID string, status store.PaymentStatus, providerRef string) (store.Order, error)
	FailPayment(ctx context.Context, requestID, reason string) (store.Order, error)
	SettleFree(ctx context.Context, requestID string) (store.Order, error)
	NotePayment(ctx context.Context, requestID, reason string) error
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
	store    Store
	provider Provider
	serviceConfig
}

// Option configures [NewService]. A nil option is an error wrapping
// [ErrInvalid].
type Option func(*serviceConfig) error

// serviceConfig is what the options of a Service set.
type serviceConfig struct {
	callTimeout   time.Duration
	settleTimeout time.Duration
	batch         int
	failpoints    *failpoint.Set
}

// WithCallTimeout bounds each provider call (default [DefaultCallTimeout]).
// A call that runs out of time counts as an unknown outcome.
func WithCallTimeout(d time.Duration) Option {
	return func(c *serviceConfig) error {
		if d <= 0 {
			return fmt.Errorf("%w: call timeout %v", ErrInvalid, d)
		}
		c.callTimeout = d
		return nil
	}
}

// WithSettleTimeout bounds the recording of a provider's answer (default
// [DefaultSettleTimeout]). The recording runs even when the caller's
// context has ended, because money may already have moved.
func WithSettleTimeout(d time.Duration) Option {
	return func(c *serviceConfig) error {
		if d <= 0 {
			return fmt.Errorf("%w: settle timeout %v", ErrInvalid, d)
		}
		c.settleTimeout = d
		return nil
	}
}

// WithReconcileBatch sets how many payments one Reconcile call examines at
// most (default [DefaultReconcileBatch], at most store.MaxPendingBatch).
func WithReconcileBatch(n int) Option {
	return func(c *serviceConfig) error {
		if n < 1 || n > store.MaxPendingBatch {
			return fmt.Errorf("%w: reconcile batch %d is outside 1..%d", ErrInvalid, n, store.MaxPendingBatch)
		}
		c.batch = n
		return nil
	}
}

// WithFailpoints arms the crash points of fp in Pay, for drills (see
// internal/failpoint: only a build with the failpoints tag can arm any). A
// nil Set, the default, arms none.
func WithFailpoints(fp *failpoint.Set) Option {
	return func(c *serviceConfig) error { c.failpoints = fp; return nil }
}

// NewService returns a Service that records payments in st and charges
// through p. An invalid or nil option is an error wrapping [ErrInvalid].
func NewService(st Store, p Provider, opts ...Option) (*Service, error) {
	if st == nil || p == nil {
		return nil, fmt.Errorf("%w: nil store or provider", ErrInvalid)
	}
	c := serviceConfig{callTimeout: DefaultCallTimeout, settleTimeout: DefaultSettleTimeout, batch: DefaultReconcileBatch}
	if err := option.Apply(&c, opts, ErrInvalid); err != nil {
		return nil, err
	}
	return &Service{store: st, provider: p, serviceConfig: c}, nil
}

// Why a payment is still open, as [PendingError.Reason] and the payment
// row (store.Payment.Reason) say it.
const (
	// ReasonInFlight: another call sent the charge and has not recorded
	// its answer yet.
	ReasonInFlight = "a charge for this order was sent and its answer is not recorded yet; the order settles when it is, or the reconciler asks the provider"
	// ReasonNoAnswer: the provider did not answer in time (or the call
	// failed on the way), so the charge may or may not have happened.
	ReasonNoAnswer = "the payment provider did not answer the charge in time; the reconciler asks it again with the same payment request id"
	// ReasonProviderDeciding: the provider answered PENDING.
	ReasonProviderDeciding = "the payment provider accepted the charge and has not decided yet; the reconciler asks it again"
	// ReasonNotRecorded: the provider's final answer came back but the
	// database could not record it.
	ReasonNotRecorded = "the payment provider answered but the answer could not be recorded yet; the reconciler records it"
	// ReasonCallRefused: the provider refused the call for a reason that
	// is not about this charge (a 4xx such as a bad credential), which a
	// fixed configuration cures.
	ReasonCallRefused = "the payment provider refused the call itself (not the charge), as with a bad credential; the reconciler retries, and the provider settings need a look"
	// ReasonQueryFailed: the reconciler could not ask the provider.
	ReasonQueryFailed = "the payment provider could not be asked about the charge; the reconciler asks again"
)

// CallTimeout is the bound on one charge or query at the provider
// (WithCallTimeout).
func (s *Service) CallTimeout() time.Duration { return s.callTimeout }

// Pay charges order orderID once. It moves the order CREATED -> PAYING and
// records a PENDING payment with request id [RequestID](orderID), then
// sends the charge with that id:
//
//   - success: the order is PAID and is returned with a nil error;
//   - an order of amount zero is free: it is PAID without a charge (the
//     payment SUCCEEDED with reason store.ReasonFree), and no provider is
//     asked to move nothing;
//   - definite decline: the order is PAYMENT_FAILED and the error is a
//     [*FailedError] (matching [ErrDeclined]);
//   - a request the provider refuses as invalid ([ErrRejected]) can never
//     succeed: the payment ends FAILED with the refusal as its reason, the
//     order PAYMENT_FAILED, and the error is a [*FailedError] matching
//     ErrDeclined and ErrRejected;
//   - no reply, an error or a PENDING answer: the order stays PAYING and
//     the error is a [*PendingError] (matching [ErrPending]) whose Reason
//     says why, also recorded on the payment; Reconcile settles it later
//     with the same request id.
//
// Pay is idempotent: a PAID order is returned with a nil error and a
// PAYMENT_FAILED one with a *FailedError, without calling the provider,
// and when the order is already PAYING (another Pay is in flight, or its
// outcome is pending) Pay sends nothing and returns a *PendingError with
// the reason last recorded. A CANCELLED order gives
// store.ErrInvalidTransition, an unknown one store.ErrNotFound. With the
// error, the order is returned as it is when it is known.
func (s *Service) Pay(ctx context.Context, orderID string) (store.Order, error) {
	rid := RequestID(orderID)
	start, err := s.store.BeginPayment(ctx, orderID, rid)
	if err != nil {
		return s.alreadySettled(start, orderID, err)
	}
	if !start.Started {
		return start.Order, &PendingError{OrderID: orderID, PaymentRequestID: rid, Reason: cmp.Or(start.Payment.Reason, ReasonInFlight)}
	}
	s.failpoints.Hit(failpoint.AfterPaymentBegin)
	if start.Payment.AmountCents == 0 {
		o, err := s.store.SettleFree(context.WithoutCancel(ctx), rid)
		if err != nil {
			return start.Order, s.stillOpen(ctx, orderID, ReasonNotRecorded, err)
		}
		return o, nil
	}
	cctx, cancel := context.WithTimeout(ctx, s.callTimeout)
	res, err := s.provider.Charge(cctx, ChargeRequest{
		PaymentRequestID: rid,
		OrderID:          orderID,
		AmountCents:      start.Payment.AmountCents,
	})
	cancel()
	if err != nil {
		return s.chargeFailed(ctx, start.Order, err)
	}
	s.failpoints.Hit(failpoint.AfterCharge)
	o, settled, err := s.settle(ctx, rid, res)
	s.failpoints.Hit(failpoint.AfterSettle)
	switch {
	case err != nil:
		return start.Order, s.stillOpen(ctx, orderID, ReasonNotRecorded, err)
	case !settled:
		return start.Order, s.stillOpen(ctx, orderID, ReasonProviderDeciding, nil)
	case o.Status == store.StatusPaymentFailed:
		return o, &FailedError{OrderID: orderID, PaymentRequestID: rid}
	}
	return o, nil
}

// alreadySettled answers a Pay whose BeginPayment refused to start: a
// settled order, or an error.
func (s *Service) alreadySettled(start store.PaymentStart, orderID string, err error) (store.Order, error) {
	var te *store.TransitionError
	if errors.As(err, &te) {
		switch te.Current {
		case store.StatusPaid:
			return start.Order, nil
		case store.StatusPaymentFailed:
			r := start.Payment.Reason
			return start.Order, &FailedError{OrderID: orderID, PaymentRequestID: RequestID(orderID), Rejected: r != "", Reason: r}
		}
	}
	return start.Order, fmt.Errorf("payment: pay order %s: %w", orderID, err)
}

// chargeFailed answers a Charge that returned err: a rejected request
// fails the payment for good; any other error leaves it open.
func (s *Service) chargeFailed(ctx context.Context, o store.Order, err error) (store.Order, error) {
	if !errors.Is(err, ErrRejected) {
		return o, s.stillOpen(ctx, o.ID, openReason(err), err)
	}
	rid := RequestID(o.ID)
	reason := rejectionReason(err)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.settleTimeout)
	defer cancel()
	failed, ferr := s.store.FailPayment(sctx, rid, reason)
	if ferr != nil {
		return o, s.stillOpen(ctx, o.ID, ReasonNotRecorded, errors.Join(err, ferr))
	}
	return failed, &FailedError{OrderID: o.ID, PaymentRequestID: rid, Rejected: true, Reason: reason}
}

// stillOpen records reason on the open payment of orderID, best effort, and
// returns the *PendingError that says it.
func (s *Service) stillOpen(ctx context.Context, orderID, reason string, cause error) *PendingError {
	rid := RequestID(orderID)
	nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.settleTimeout)
	defer cancel()
	// A database that cannot take the note cannot take the settlement
	// either: the reconciler writes both later.
	_ = s.store.NotePayment(nctx, rid, reason)
	return &PendingError{OrderID: orderID, PaymentRequestID: rid, Cause: cause, Reason: reason}
}

// openReason is why a failed provider call leaves a payment open.
func openReason(err error) string {
	if errors.Is(err, ErrInvalid) {
		return ReasonCallRefused
	}
	return ReasonNoAnswer
}

// rejectionReason is the payment's recorded reason for a rejected request,
// at most store.MaxReasonLen bytes.
func rejectionReason(err error) string {
	detail := err.Error()
	var re *rejectedError
	if errors.As(err, &re) {
		detail = re.detail
	}
	r := "the payment provider rejected the charge request, which no retry can fix: " + detail
	if len(r) > store.MaxReasonLen {
		r = strings.ToValidUTF8(r[:store.MaxReasonLen], "")
	}
	return r
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
	// Rejected counts the Failed payments that failed because the provider
	// refused the charge request itself (ErrRejected).
	Rejected int
	// Pending counts payments the provider has no final answer for yet.
	Pending int
	// Recharged counts charges sent again (with the same request id)
	// because the provider had never received them.
	Recharged int
	// Errors counts payments left as they were because a call failed.
	Errors int
	// Open lists every payment this call left open (Pending and Errors),
	// with why.
	Open []OpenPayment
}

// OpenPayment is a payment a Reconcile call left open.
type OpenPayment struct {
	RequestID string
	OrderID   string
	// Attempts counts the reconciliation rounds that found it open.
	Attempts int
	// Reason says why it is still open, as recorded on the payment.
	Reason string
	// Err is the failed call, or nil when the provider answered PENDING.
	Err error
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
	if p.AmountCents == 0 {
		// A free order whose Pay stopped before settling it.
		if _, err := s.store.SettleFree(ctx, p.RequestID); err != nil {
			return s.leaveOpen(ctx, p, rep, ReasonNotRecorded, fmt.Errorf("payment: reconcile %s: settle free: %w", p.RequestID, err))
		}
		rep.Paid++
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, s.callTimeout)
	res, err := s.provider.Query(cctx, p.RequestID)
	cancel()
	if err != nil {
		return s.leaveOpen(ctx, p, rep, ReasonQueryFailed, fmt.Errorf("payment: reconcile %s: query: %w", p.RequestID, err))
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
		if errors.Is(err, ErrRejected) {
			return s.rejectOpen(ctx, p, rep, err)
		}
		if err != nil {
			return s.leaveOpen(ctx, p, rep, openReason(err), fmt.Errorf("payment: reconcile %s: charge again: %w", p.RequestID, err))
		}
	}
	o, settled, err := s.settle(ctx, p.RequestID, res)
	switch {
	case err != nil:
		return s.leaveOpen(ctx, p, rep, ReasonNotRecorded, err)
	case !settled:
		return s.leaveOpen(ctx, p, rep, ReasonProviderDeciding, nil) // the claim restarted its age: a later round asks again
	case o.Status == store.StatusPaid:
		rep.Paid++
	default:
		rep.Failed++
	}
	return nil
}

// rejectOpen fails payment p for good, the provider having refused its
// request as invalid.
func (s *Service) rejectOpen(ctx context.Context, p store.Payment, rep *ReconcileReport, cause error) error {
	if _, err := s.store.FailPayment(ctx, p.RequestID, rejectionReason(cause)); err != nil {
		return s.leaveOpen(ctx, p, rep, ReasonNotRecorded, fmt.Errorf("payment: reconcile %s: record the rejection: %w", p.RequestID, errors.Join(cause, err)))
	}
	rep.Failed++
	rep.Rejected++
	return nil
}

// leaveOpen notes why payment p stays open, on the payment (best effort)
// and in rep, and returns err: nil when the provider answered PENDING.
func (s *Service) leaveOpen(ctx context.Context, p store.Payment, rep *ReconcileReport, reason string, err error) error {
	_ = s.store.NotePayment(ctx, p.RequestID, reason)
	if err == nil {
		rep.Pending++
	}
	rep.Open = append(rep.Open, OpenPayment{RequestID: p.RequestID, OrderID: p.OrderID, Attempts: p.Attempts, Reason: reason, Err: err})
	return err
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
