// Package payfake is an in-process payment provider for tests and the
// demo: a [payment.Provider] that is idempotent on the payment request id,
// counts what happened to each id, and fails on demand (declines, lost
// replies, lost requests, pending charges, refusals). It is test support,
// so no production package may import it; the HTTP fake provider that
// devtools/cmd/fakepay serves is devtools/fakepay.
package payfake

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/internal/option"
	"github.com/quorumlock/quorumlock/internal/wait"
	"github.com/quorumlock/quorumlock/orders/payment"
)

// AnyRequest, given as the id of a fault, makes the fault apply to the next
// charge of any payment request id. Faults queued for a specific id are
// used first.
const AnyRequest = ""

// Fault is a failure the [Fake] plays on a future Charge.
type Fault int

// Faults.
const (
	// FaultDecline declines a new charge: FAILED is recorded and returned,
	// and no money moves. On an id already charged it changes nothing.
	FaultDecline Fault = iota + 1
	// FaultLoseReply processes the charge normally, then loses the reply:
	// Charge returns [payment.ErrTimeout] although the charge happened.
	FaultLoseReply
	// FaultDrop loses the request before it reaches the provider: nothing
	// is recorded and Charge returns [payment.ErrTimeout].
	FaultDrop
	// FaultPending accepts a new charge as PENDING; Query answers PENDING
	// until Complete settles it. On an id already charged it changes
	// nothing.
	FaultPending
	// FaultReject refuses the request as invalid, as a provider does with
	// an amount or a field it cannot take: nothing is recorded and Charge
	// returns an error matching [payment.ErrRejected].
	FaultReject
)

// String names the fault.
func (f Fault) String() string {
	switch f {
	case FaultDecline:
		return "decline"
	case FaultLoseReply:
		return "lose reply"
	case FaultDrop:
		return "drop"
	case FaultPending:
		return "pending"
	case FaultReject:
		return "reject"
	}
	return "Fault(" + strconv.Itoa(int(f)) + ")"
}

// Fake is an in-memory payment provider for tests. It is idempotent on
// the payment request id like a real provider should be, counts what
// happened to each id, and fails on demand. It is safe for concurrent use;
// the zero value is not usable, call [New].
type Fake struct {
	mu       sync.Mutex
	latency  time.Duration
	records  map[string]*fakeRecord
	faults   map[string][]Fault
	received map[string]int
	seq      int
}

type fakeRecord struct {
	req     payment.ChargeRequest
	result  payment.Result
	charged int // times money moved for this id: 0 or 1
}

// Option configures [New].
type Option func(*config) error

type config struct {
	latency time.Duration
}

// errOption is what a nil option's error wraps.
var errOption = fmt.Errorf("payfake: %w", payment.ErrInvalid)

// WithLatency delays every Charge and Query by d before the provider sees
// it. A context that ends during the delay aborts the call: the request
// never arrives. A d below 0 counts as 0.
func WithLatency(d time.Duration) Option {
	return func(c *config) error { c.latency = max(d, 0); return nil }
}

// New returns a Fake with no charges and no faults queued. A nil option is
// an error wrapping [payment.ErrInvalid].
func New(opts ...Option) (*Fake, error) {
	var c config
	if err := option.Apply(&c, opts, errOption); err != nil {
		return nil, err
	}
	return &Fake{
		latency:  c.latency,
		records:  make(map[string]*fakeRecord),
		faults:   make(map[string][]Fault),
		received: make(map[string]int),
	}, nil
}

// SetLatency changes the delay of later calls.
func (f *Fake) SetLatency(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latency = max(d, 0)
}

// Inject queues fault for the next Charge of id ([AnyRequest] for any id).
// Each queued fault is used by exactly one Charge.
func (f *Fake) Inject(id string, fault Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults[id] = append(f.faults[id], fault)
}

// FailNext makes the next charge of id ([AnyRequest] for any) a decline.
func (f *Fake) FailNext(id string) { f.Inject(id, FaultDecline) }

// LoseReplyNext makes the next charge of id ([AnyRequest] for any) happen
// but return [payment.ErrTimeout]: the "charged, then the reply was lost" case.
func (f *Fake) LoseReplyNext(id string) { f.Inject(id, FaultLoseReply) }

// DropNext makes the next charge of id ([AnyRequest] for any) time out
// without reaching the provider.
func (f *Fake) DropNext(id string) { f.Inject(id, FaultDrop) }

// PendNext makes the next new charge of id ([AnyRequest] for any) stay
// PENDING until [Fake.Complete].
func (f *Fake) PendNext(id string) { f.Inject(id, FaultPending) }

// Complete settles a PENDING charge as [payment.StatusSucceeded] or
// [payment.StatusFailed], as the provider would later on.
func (f *Fake) Complete(id string, status payment.Status) error {
	if status != payment.StatusSucceeded && status != payment.StatusFailed {
		return fmt.Errorf("%w: cannot complete a charge as %q", payment.ErrInvalid, status)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.records[id]
	if !ok || r.result.Status != payment.StatusPending {
		return fmt.Errorf("%w: no pending charge %q", payment.ErrInvalid, id)
	}
	r.result.Status = status
	if status == payment.StatusSucceeded {
		r.charged++
	}
	return nil
}

// Charges returns how many times money actually moved for id. An
// idempotent provider never goes above 1.
func (f *Fake) Charges(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r, ok := f.records[id]; ok {
		return r.charged
	}
	return 0
}

// TotalCharges returns how many times money moved, over all ids.
func (f *Fake) TotalCharges() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.records {
		n += r.charged
	}
	return n
}

// Calls returns how many Charge requests for id reached the provider,
// duplicates included (dropped ones are not counted).
func (f *Fake) Calls(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.received[id]
}

// Charge implements [payment.Provider].
func (f *Fake) Charge(ctx context.Context, req payment.ChargeRequest) (payment.Result, error) {
	if req.PaymentRequestID == "" || req.AmountCents <= 0 {
		return payment.Result{}, payment.Reject(fmt.Sprintf("fake provider: charge %q of %d cents: want an id and a positive amount", req.PaymentRequestID, req.AmountCents))
	}
	if err := f.wait(ctx); err != nil {
		return payment.Result{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()

	fault := f.takeFault(req.PaymentRequestID)
	switch fault {
	case FaultDrop:
		return payment.Result{}, fmt.Errorf("fake provider: charge %s: request lost: %w", req.PaymentRequestID, payment.ErrTimeout)
	case FaultReject:
		f.received[req.PaymentRequestID]++
		return payment.Result{}, payment.Reject("fake provider: charge " + req.PaymentRequestID + " refused as invalid")
	}
	f.received[req.PaymentRequestID]++
	r, ok := f.records[req.PaymentRequestID]
	if !ok {
		f.seq++
		r = &fakeRecord{req: req, result: payment.Result{Status: payment.StatusSucceeded, ProviderRef: "fake-" + strconv.Itoa(f.seq)}}
		switch fault {
		case FaultDecline:
			r.result.Status = payment.StatusFailed
		case FaultPending:
			r.result.Status = payment.StatusPending
		default:
			r.charged = 1
		}
		f.records[req.PaymentRequestID] = r
	}
	if fault == FaultLoseReply {
		return payment.Result{}, fmt.Errorf("fake provider: charge %s: reply lost: %w", req.PaymentRequestID, payment.ErrTimeout)
	}
	return r.result, nil
}

// Query implements [payment.Provider].
func (f *Fake) Query(ctx context.Context, paymentRequestID string) (payment.Result, error) {
	if paymentRequestID == "" {
		return payment.Result{}, fmt.Errorf("%w: empty payment request id", payment.ErrInvalid)
	}
	if err := f.wait(ctx); err != nil {
		return payment.Result{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if r, ok := f.records[paymentRequestID]; ok {
		return r.result, nil
	}
	return payment.Result{Status: payment.StatusNotFound}, nil
}

// takeFault pops the next fault for id, or for any id. Callers hold mu.
func (f *Fake) takeFault(id string) Fault {
	for _, key := range []string{id, AnyRequest} {
		if q := f.faults[key]; len(q) > 0 {
			f.faults[key] = q[1:]
			if len(q) == 1 {
				delete(f.faults, key)
			}
			return q[0]
		}
	}
	return 0
}

// wait plays the configured latency, or returns early when ctx ends.
func (f *Fake) wait(ctx context.Context) error {
	f.mu.Lock()
	d := f.latency
	f.mu.Unlock()
	if d <= 0 {
		return ctx.Err()
	}
	if err := wait.Sleep(ctx, d); err != nil {
		return fmt.Errorf("fake provider: %w (%w)", payment.ErrTimeout, err)
	}
	return nil
}
