package orders

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/quorumlock/quorumlock/internal/option"
	"github.com/quorumlock/quorumlock/orders/auth"
	"github.com/quorumlock/quorumlock/orders/internal/create"
	"github.com/quorumlock/quorumlock/orders/internal/placement"
	"github.com/quorumlock/quorumlock/orders/internal/transport"
	"github.com/quorumlock/quorumlock/orders/store"
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

// New returns a service over st. An invalid or nil option is an error
// wrapping [ErrConfig].
func New(st *store.Store, opts ...Option) (*Service, error) {
	if st == nil {
		return nil, fmt.Errorf("%w: a store is required", ErrConfig)
	}
	c := config{fallback: FallbackDB, lockRule: LockContended, codes: CodesSeed, retry: time.Second, attempts: 3,
		batchLimit: DefaultBatchLimit, queueLimit: DefaultQueueLimit, queueWait: DefaultQueueWait,
		soldOutFor: DefaultSoldOutRecheck, log: slog.New(slog.DiscardHandler)}
	if err := option.Apply(&c, opts, ErrConfig); err != nil {
		return nil, err
	}
	placer, err := placement.New(st, placement.Config{
		Locker: c.locker, Fallback: c.fallback, Rule: c.lockRule, Snapshot: transport.Snapshot, Retry: c.retry, Attempts: c.attempts,
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
		Codes: c.codes, Retry: c.retry, Deadline: c.requestDeadline(), CallbackSecret: c.callbackSecret,
		CallbackTolerance: c.callbackTolerance, Metrics: c.metrics, Log: c.log})
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

// requestDeadline bounds the requests other than POST /orders: the
// option's, else the placing budget plus the provider's call timeout.
func (c config) requestDeadline() time.Duration {
	if c.deadline > 0 {
		return c.deadline
	}
	d := c.budget()
	if c.payments != nil {
		d += c.payments.CallTimeout()
	}
	return d
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
