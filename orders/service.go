package orders

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quorumlock/quorumlock/internal/failpoint"
	"github.com/quorumlock/quorumlock/internal/option"
	"github.com/quorumlock/quorumlock/orders/auth"
	"github.com/quorumlock/quorumlock/orders/create"
	"github.com/quorumlock/quorumlock/orders/idem"
	"github.com/quorumlock/quorumlock/orders/metrics"
	"github.com/quorumlock/quorumlock/orders/payment"
	"github.com/quorumlock/quorumlock/orders/placement"
	"github.com/quorumlock/quorumlock/orders/store"
	"github.com/quorumlock/quorumlock/orders/transport"
)

// Codes says which HTTP status codes answer the two idempotency conflicts
// (see transport.Codes).
type Codes = transport.Codes

// Code sets.
const (
	// CodesSeed answers 202 Accepted (with Retry-After and a Location to
	// poll) while a request is in flight, and 409 Conflict for a key reused
	// with a different payload. The default.
	CodesSeed = transport.CodesSeed
	// CodesIETF answers as the IETF Idempotency-Key draft does: 409
	// Conflict (with Retry-After) while a request is in flight, and 422
	// Unprocessable Content for a key reused with a different payload.
	CodesIETF = transport.CodesIETF
)

// Headers of the HTTP contract.
const (
	HeaderIdempotencyKey = transport.HeaderIdempotencyKey
	HeaderReplayed       = transport.HeaderReplayed
)

// Callback limits.
const (
	// MaxCallbackBody is the largest callback body read.
	MaxCallbackBody = transport.MaxCallbackBody
	// DefaultCallbackTolerance is how far a callback's signed timestamp may
	// be from this host's clock.
	DefaultCallbackTolerance = transport.DefaultCallbackTolerance
)

// Metrics are the service's Prometheus series. A nil *Metrics records
// nothing.
type Metrics = metrics.Metrics

// NewMetrics registers the service's metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) { return metrics.New(reg) }

// ParseCodes reads Codes from configuration; "" is CodesSeed.
func ParseCodes(s string) (Codes, error) {
	switch c := Codes(s); c {
	case CodesSeed, CodesIETF:
		return c, nil
	case "":
		return CodesSeed, nil
	}
	return "", fmt.Errorf("%w: idempotency codes %q: want seed or ietf", ErrConfig, s)
}

// ErrConfig is wrapped by every configuration error of New.
var ErrConfig = errors.New("orders: invalid configuration")

// Defaults of the options.
const (
	// DefaultBatchLimit is the most orders one transaction places.
	DefaultBatchLimit = 128
	// DefaultQueueLimit is the most requests that wait per product (with
	// a lock) or per instance (without).
	DefaultQueueLimit = 4096
	// DefaultQueueWait is the longest a request waits for its turn before
	// it is answered 503, having written nothing: room for the batch ahead
	// to wait its lock out, and its own to run.
	DefaultQueueWait = 5 * time.Second
	// DefaultSoldOutRecheck bounds how long a product Postgres reported
	// sold out is answered from that report before a transaction looks
	// again: a restock on another instance is seen within it.
	DefaultSoldOutRecheck = time.Second
)

// Service is the order service, assembled from its layers: the transport
// (HTTP handler and rendering) over the create flow (idempotency claim,
// settle) over placement (queue, combining, lock, store). It is safe for
// concurrent use; several instances may share one Postgres and one set of
// Redis nodes.
type Service struct {
	store  *store.Store
	placer *placement.Placer
	api    *transport.API
}

type config struct {
	idem              *idem.Store
	locker            Locker
	payments          *payment.Service
	fallback          Fallback
	codes             Codes
	callbackSecret    []byte
	callbackTolerance time.Duration
	retry             time.Duration
	attempts          int
	batchLimit        int
	queueLimit        int
	queueWait         time.Duration
	soldOutFor        time.Duration
	metrics           *Metrics
	log               *slog.Logger
	failpoints        *failpoint.Set
}

// Option configures New.
type Option func(*config) error

// WithIdempotency sets the Redis fast path for idempotency claims. Without
// it every request goes to Postgres, which still answers replays.
func WithIdempotency(s *idem.Store) Option {
	return func(c *config) error { c.idem = s; return nonNil(s, "idempotency store") }
}

// WithLocker sets the stock lock. With it, the requests for one product
// queue on this instance and are placed in batches, each under one lease
// (see the package documentation); without it, each request runs its own
// transaction and Postgres arbitrates alone.
func WithLocker(l Locker) Option {
	return func(c *config) error { c.locker = l; return nonNil(l, "locker") }
}

// WithFallback sets what happens when the lock cannot be taken (default
// FallbackDB).
func WithFallback(f Fallback) Option {
	return func(c *config) error {
		if f == "" {
			return fmt.Errorf("%w: empty lock fallback", ErrConfig)
		}
		var err error
		c.fallback, err = ParseFallback(string(f))
		return err
	}
}

// WithIdempotencyCodes sets the status codes of the idempotency conflicts
// (default CodesSeed). Either way nothing is saved for them: a retry with
// the same key still gets the request's real answer.
func WithIdempotencyCodes(codes Codes) Option {
	return func(c *config) error {
		if _, err := ParseCodes(string(codes)); err != nil || codes == "" {
			return fmt.Errorf("%w: idempotency codes %q: want seed or ietf", ErrConfig, codes)
		}
		c.codes = codes
		return nil
	}
}

// WithPayments enables POST /orders/{id}/pay.
func WithPayments(p *payment.Service) Option {
	return func(c *config) error { c.payments = p; return nonNil(p, "payment service") }
}

// WithPaymentCallbacks makes the handler take provider callbacks on POST
// /payments/callback, signed with secret (see payment.VerifyCallback) and
// within tolerance of this host's clock (0: DefaultCallbackTolerance).
// Without it that route answers 404.
func WithPaymentCallbacks(secret []byte, tolerance time.Duration) Option {
	return func(c *config) error {
		if len(secret) < 16 {
			return fmt.Errorf("%w: the payment callback secret must be at least 16 bytes", ErrConfig)
		}
		if tolerance < 0 {
			return fmt.Errorf("%w: negative callback tolerance %v", ErrConfig, tolerance)
		}
		if tolerance == 0 {
			tolerance = DefaultCallbackTolerance
		}
		c.callbackSecret, c.callbackTolerance = append([]byte(nil), secret...), tolerance
		return nil
	}
}

// WithRetryAfter sets the Retry-After of 503 answers (default 1s).
func WithRetryAfter(d time.Duration) Option {
	return func(c *config) error { c.retry = d; return positive(d, "retry-after") }
}

// WithBatchLimit sets the most orders one transaction places (default
// DefaultBatchLimit, at most store.MaxBatch).
func WithBatchLimit(n int) Option {
	return func(c *config) error {
		if n < 1 || n > store.MaxBatch {
			return fmt.Errorf("%w: batch limit %d: want 1..%d", ErrConfig, n, store.MaxBatch)
		}
		c.batchLimit = n
		return nil
	}
}

// WithQueue bounds the waiting: at most limit requests wait, per product
// with a locker, per instance without one (default DefaultQueueLimit), and
// none longer than wait (default DefaultQueueWait). A request past either
// bound is answered 503 with Retry-After at once and writes nothing.
func WithQueue(limit int, wait time.Duration) Option {
	return func(c *config) error {
		if limit < 1 {
			return fmt.Errorf("%w: queue limit %d: want at least 1", ErrConfig, limit)
		}
		c.queueLimit, c.queueWait = limit, wait
		return positive(wait, "queue wait")
	}
}

// WithSoldOutRecheck bounds how long a product that Postgres reported sold
// out is answered from that report (default DefaultSoldOutRecheck): the
// requests meanwhile get the out-of-stock answer, saved in one batched
// write, without the lock. A cancel or expiry on this instance ends it at
// once; a restock elsewhere within d.
func WithSoldOutRecheck(d time.Duration) Option {
	return func(c *config) error { c.soldOutFor = d; return positive(d, "sold-out recheck") }
}

// WithMetrics records the service's counters in m.
func WithMetrics(m *Metrics) Option {
	return func(c *config) error { c.metrics = m; return nonNil(m, "metrics") }
}

// WithFailpoints arms the crash points of fp in the order flow, for drills
// (see internal/failpoint: only a build with the failpoints tag can arm
// any). A nil Set, the default, arms none.
func WithFailpoints(fp *failpoint.Set) Option {
	return func(c *config) error { c.failpoints = fp; return nil }
}

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error { c.log = l; return nonNil(l, "logger") }
}

// nonNil is the error of an option given a nil value.
func nonNil[T comparable](v T, what string) error {
	var zero T
	if v == zero {
		return fmt.Errorf("%w: nil %s", ErrConfig, what)
	}
	return nil
}

func positive(d time.Duration, what string) error {
	if d <= 0 {
		return fmt.Errorf("%w: %s %v: want more than 0", ErrConfig, what, d)
	}
	return nil
}

// New returns a service over st. An invalid or nil option is an error
// wrapping [ErrConfig].
func New(st *store.Store, opts ...Option) (*Service, error) {
	if st == nil {
		return nil, fmt.Errorf("%w: a store is required", ErrConfig)
	}
	c := config{fallback: FallbackDB, codes: CodesSeed, retry: time.Second, attempts: 3,
		batchLimit: DefaultBatchLimit, queueLimit: DefaultQueueLimit, queueWait: DefaultQueueWait,
		soldOutFor: DefaultSoldOutRecheck, log: slog.New(slog.DiscardHandler)}
	if err := option.Apply(&c, opts, ErrConfig); err != nil {
		return nil, err
	}
	placer, err := placement.New(st, placement.Config{
		Locker: c.locker, Fallback: c.fallback, Snapshot: transport.Snapshot, Retry: c.retry, Attempts: c.attempts,
		Budget: c.budget(), OutcomeWait: c.outcomeWait(), BatchLimit: c.batchLimit, QueueLimit: c.queueLimit,
		QueueWait: c.queueWait, SoldOutFor: c.soldOutFor, Metrics: c.metrics, Log: c.log, Failpoints: c.failpoints,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	flow, err := create.New(st, placer, create.Config{Idem: c.idem, Retry: c.retry, Budget: c.budget(),
		Metrics: c.metrics, Log: c.log, Failpoints: c.failpoints})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	api, err := transport.New(transport.Config{Flow: flow, Store: st, Payments: c.payments, Restocked: placer.Restocked,
		Codes: c.codes, Retry: c.retry, CallbackSecret: c.callbackSecret, CallbackTolerance: c.callbackTolerance,
		Metrics: c.metrics, Log: c.log})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return &Service{store: st, placer: placer, api: api}, nil
}

// budget is how long the placing of a request may take: less than the
// processing lease, so a retry never takes over a request still running.
func (c config) budget() time.Duration {
	if c.idem == nil {
		return 30 * time.Second
	}
	return c.idem.Lease() * 4 / 5
}

// outcomeWait is the Retry-After of an outcome in doubt: the kept claim
// sends the next attempt to Postgres after its lease.
func (c config) outcomeWait() time.Duration {
	if c.idem == nil {
		return c.retry
	}
	return c.idem.Lease()
}

// Handler serves the order API (see transport.API.Handler):
//
//	POST /orders                    create (Idempotency-Key required)
//	GET  /orders/{id}               read one of the caller's orders
//	POST /orders/{id}/pay           pay (idempotent; payment_request_id = {id}:pay)
//	POST /orders/{id}/cancel        cancel a CREATED or PAYMENT_FAILED order (restocks once)
//	GET  /orders/requests?key=K     the saved answer of a create request
//	POST /payments/callback         a provider's signed callback (see WithPaymentCallbacks)
//
// Every route but the callback needs Authorization: Bearer <HS256 JWT>; its
// sub is the user. The callback is authenticated by its HMAC signature.
func (s *Service) Handler(v *auth.Verifier) http.Handler { return s.api.Handler(v) }

// Restocked tells the service that units of product came back to its
// stock (a cancelled or expired order): a sold-out report of this instance
// ends at once.
func (s *Service) Restocked(product string) { s.placer.Restocked(product) }

// Store returns the service's store.
func (s *Service) Store() *store.Store { return s.store }
