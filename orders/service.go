package orders

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/quorumlock/quorumlock/internal/failpoint"
	"github.com/quorumlock/quorumlock/orders/idem"
	"github.com/quorumlock/quorumlock/orders/payment"
	"github.com/quorumlock/quorumlock/orders/store"
	"github.com/quorumlock/quorumlock/quorum"
)

// Locker takes the stock lock. *quorum.Locker satisfies it through
// QuorumLocker.
type Locker interface {
	Lock(ctx context.Context, key string) (Lease, error)
}

// Lease is a held stock lock.
type Lease interface {
	// Fence is the lease's fence token for its key (> 0).
	Fence() int64
	// Unlock releases the lock.
	Unlock(ctx context.Context) error
}

// Fencer issues fence tokens; fencing.Issuer satisfies it. The service
// uses it directly when it arbitrates with Postgres alone, with the same
// key as the lock, so those tokens and the lock's share one sequence.
type Fencer interface {
	Next(ctx context.Context, key string) (int64, error)
}

type quorumLocker struct{ l *quorum.Locker }

func (q quorumLocker) Lock(ctx context.Context, key string) (Lease, error) {
	lease, err := q.l.Lock(ctx, key)
	if err != nil {
		return nil, err
	}
	return lease, nil
}

// QuorumLocker adapts a quorum.Locker (configured with a Fencer, so that
// every lease carries a fence) to Locker.
func QuorumLocker(l *quorum.Locker) Locker { return quorumLocker{l} }

// Fallback says what the service does when the lock cannot be taken.
type Fallback string

// Fallback modes.
const (
	// FallbackDB lets Postgres arbitrate alone: a fence from the Fencer and
	// the conditional decrement still hold. The default.
	FallbackDB Fallback = "db"
	// FallbackReject answers 503 with Retry-After.
	FallbackReject Fallback = "reject"
)

// ParseFallback reads a Fallback from configuration.
func ParseFallback(s string) (Fallback, error) {
	switch f := Fallback(s); f {
	case FallbackDB, FallbackReject:
		return f, nil
	case "":
		return FallbackDB, nil
	}
	return "", fmt.Errorf("%w: lock fallback %q: want db or reject", ErrConfig, s)
}

// Codes says which HTTP status codes answer the two idempotency conflicts:
// a request whose key another attempt is still processing, and a key
// reused with a different payload.
type Codes string

// Code sets.
const (
	// CodesSeed answers 202 Accepted (with Retry-After and a Location to
	// poll) while a request is in flight, and 409 Conflict for a key reused
	// with a different payload. The default.
	CodesSeed Codes = "seed"
	// CodesIETF answers as the IETF Idempotency-Key draft does: 409
	// Conflict (with Retry-After) while a request is in flight, and 422
	// Unprocessable Content for a key reused with a different payload.
	CodesIETF Codes = "ietf"
)

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

// Stock lock keys are "stock:" + product id.
func stockKey(productID string) string { return "stock:" + productID }

// Service runs the order flow. It is safe for concurrent use; several
// instances may share one Postgres and one set of Redis nodes.
type Service struct {
	store    *store.Store
	fencer   Fencer
	idem     *idem.Store
	locker   Locker
	payments *payment.Service
	fallback Fallback
	codes    Codes

	callbackSecret    []byte
	callbackTolerance time.Duration
	retry             time.Duration
	attempts          int
	metrics           *Metrics
	log               *slog.Logger
	failpoints        *failpoint.Set
}

// Option configures New.
type Option func(*Service) error

// WithIdempotency sets the Redis fast path for idempotency claims. Without
// it every request goes to Postgres, which still answers replays.
func WithIdempotency(s *idem.Store) Option {
	return func(svc *Service) error { svc.idem = s; return nil }
}

// WithLocker sets the stock lock. Without it the service arbitrates with
// Postgres alone.
func WithLocker(l Locker) Option {
	return func(svc *Service) error { svc.locker = l; return nil }
}

// WithFallback sets what happens when the lock cannot be taken (default
// FallbackDB).
func WithFallback(f Fallback) Option {
	return func(svc *Service) error {
		if _, err := ParseFallback(string(f)); err != nil {
			return err
		}
		svc.fallback = f
		return nil
	}
}

// WithIdempotencyCodes sets the status codes of the idempotency conflicts
// (default CodesSeed). Either way nothing is saved for them: a retry with
// the same key still gets the request's real answer.
func WithIdempotencyCodes(c Codes) Option {
	return func(svc *Service) error {
		if _, err := ParseCodes(string(c)); err != nil || c == "" {
			return fmt.Errorf("%w: idempotency codes %q: want seed or ietf", ErrConfig, c)
		}
		svc.codes = c
		return nil
	}
}

// WithPayments enables POST /orders/{id}/pay.
func WithPayments(p *payment.Service) Option {
	return func(svc *Service) error { svc.payments = p; return nil }
}

// WithPaymentCallbacks makes the handler take provider callbacks on POST
// /payments/callback, signed with secret (see payment.VerifyCallback) and
// within tolerance of this host's clock (0: DefaultCallbackTolerance).
// Without it that route answers 404.
func WithPaymentCallbacks(secret []byte, tolerance time.Duration) Option {
	return func(svc *Service) error {
		if len(secret) < 16 {
			return errors.New("orders: the payment callback secret must be at least 16 bytes")
		}
		if tolerance < 0 {
			return fmt.Errorf("orders: negative callback tolerance %v", tolerance)
		}
		if tolerance == 0 {
			tolerance = DefaultCallbackTolerance
		}
		svc.callbackSecret, svc.callbackTolerance = append([]byte(nil), secret...), tolerance
		return nil
	}
}

// WithRetryAfter sets the Retry-After of 503 answers (default 1s).
func WithRetryAfter(d time.Duration) Option {
	return func(svc *Service) error {
		if d <= 0 {
			return fmt.Errorf("%w: retry-after %v", ErrConfig, d)
		}
		svc.retry = d
		return nil
	}
}

// WithMetrics records the service's counters in m.
func WithMetrics(m *Metrics) Option {
	return func(svc *Service) error { svc.metrics = m; return nil }
}

// WithFailpoints arms the crash points of fp in the order flow, for drills
// (see internal/failpoint: only a build with the failpoints tag can arm
// any). A nil Set, the default, arms none.
func WithFailpoints(fp *failpoint.Set) Option {
	return func(svc *Service) error { svc.failpoints = fp; return nil }
}

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option {
	return func(svc *Service) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrConfig)
		}
		svc.log = l
		return nil
	}
}

// New returns a service over st. fencer issues the fences used when the
// service arbitrates with Postgres alone.
func New(st *store.Store, fencer Fencer, opts ...Option) (*Service, error) {
	if st == nil || fencer == nil {
		return nil, fmt.Errorf("%w: a store and a fencer are required", ErrConfig)
	}
	s := &Service{store: st, fencer: fencer, fallback: FallbackDB, codes: CodesSeed, retry: time.Second, attempts: 3,
		log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// budget is how long the locked part of a request may take: less than the
// processing lease, so a retry never takes over a request still running.
func (s *Service) budget() time.Duration {
	if s.idem == nil {
		return 30 * time.Second
	}
	return s.idem.Lease() * 4 / 5
}

// Store returns the service's store.
func (s *Service) Store() *store.Store { return s.store }

// unlock releases a lease after the response is saved, bounded, and even
// when the request's context has ended, and notes in rl how it went.
func (s *Service) unlock(ctx context.Context, rl *requestLog, lease Lease) {
	if lease == nil {
		return
	}
	rl.releasing(lease)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	err := lease.Unlock(ctx)
	rl.unlocked(err)
	if err != nil {
		s.log.Warn("stock unlock not confirmed", "key", rl.lockKey, "token", rl.token, "unlock", rl.unlock, "err", err)
	}
}
