package orders

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/quorumlock/quorumlock/internal/failpoint"
	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/orders/idem"
	"github.com/quorumlock/quorumlock/orders/payment"
	"github.com/quorumlock/quorumlock/orders/store"
)

type config struct {
	idem              *idem.Store
	locker            lease.Locker
	payments          *payment.Service
	fallback          Fallback
	lockRule          LockRule
	codes             Codes
	callbackSecret    []byte
	callbackTolerance time.Duration
	retry             time.Duration
	attempts          int
	batchLimit        int
	queueLimit        int
	queueWait         time.Duration
	soldOutFor        time.Duration
	deadline          time.Duration
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

// WithLocker sets the stock lock: a *quorum.Locker or an *etcdlock.Locker,
// each given a fencing.Reserver as its Fencer, so that every lease carries
// reserved fences that the order transaction takes. With it, the requests
// queue on this instance and are placed in batches across products, each
// in one transaction, under one lease on the stock keys of the batch's
// products when WithLockRule says (see the package documentation);
// without it, each request runs its own transaction and Postgres
// arbitrates alone. A lock that is held past the
// wait (lease.ErrNotAcquired) answers 503; one that no majority can grant
// (lease.ErrQuorumUnavailable, lease.ErrClosed) goes as WithFallback says.
func WithLocker(l lease.Locker) Option {
	return func(c *config) error { c.locker = l; return nonNil(l, "locker") }
}

// WithLockRule sets which batches take the lock (default LockContended).
func WithLockRule(r LockRule) Option {
	return func(c *config) error {
		if r == "" {
			return fmt.Errorf("%w: empty lock rule", ErrConfig)
		}
		_, err := ParseLockRule(string(r))
		c.lockRule = r
		return err
	}
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

// WithDeadline bounds one request of the routes other than POST /orders
// (whose placing has its own budget, under the processing lease): reading,
// paying and cancelling an order, polling a create request, a provider's
// callback. When it runs out, say because the database does not answer
// (a paused or cut-off primary), the client gets 503 with Retry-After
// instead of waiting. The default is the placing budget plus the payment
// provider's call timeout.
func WithDeadline(d time.Duration) Option {
	return func(c *config) error { c.deadline = d; return positive(d, "deadline") }
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
