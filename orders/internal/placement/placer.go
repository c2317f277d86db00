// Package placement places the orders of the service: each request is a
// cart (a single-product order is a one-line cart); with a Locker the
// requests queue on this instance (one queue per product for one-line
// carts, one for the carts of several products) and the head of a queue
// places a batch of them in one transaction under one lease on the stock
// keys of their products; without one, each request runs its own
// transaction once admitted, and Postgres arbitrates alone.
//
// A Placer answers each request with an answer.Answer, what it means for
// the idempotency record, and what it did, for the request's log line.
package placement

import (
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/internal/failpoint"
	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/orders/internal/metrics"
	"github.com/quorumlock/quorumlock/orders/store"
)

// ErrConfig is wrapped by the configuration errors of New.
var ErrConfig = errors.New("placement: invalid configuration")

// Config is what a Placer is built with; the order service fills it from
// its options. Zero limits are errors.
type Config struct {
	// Locker is the stock lock (a quorum or an etcdlock Locker, with a
	// fencing.Reserver as its Fencer); nil: Postgres arbitrates alone.
	// Lock errors matching lease.ErrNotAcquired answer 503 (contention);
	// lease.ErrQuorumUnavailable or lease.ErrClosed go without the lock
	// as Fallback says; any other is the fence's database.
	Locker lease.Locker
	// Fallback is what happens when the lock cannot be taken.
	Fallback Fallback
	// Snapshot renders the answer saved with a new outcome.
	Snapshot func(store.Outcome) store.Snapshot
	// Retry is the Retry-After of 503 answers.
	Retry time.Duration
	// Attempts bounds the transactions of a batch (a stale fence retries).
	Attempts int
	// Budget bounds the placing of one batch.
	Budget time.Duration
	// OutcomeWait is the Retry-After of an outcome in doubt: the kept
	// claim's lease (Retry without claims).
	OutcomeWait time.Duration
	// BatchLimit, QueueLimit, QueueWait and SoldOutFor: see the service's
	// options.
	BatchLimit, QueueLimit int
	QueueWait, SoldOutFor  time.Duration
	Metrics                *metrics.Metrics
	Log                    *slog.Logger
	Failpoints             *failpoint.Set
}

// Placer places orders. It is safe for concurrent use.
type Placer struct {
	st *store.Store
	Config
	queues   *combiner   // with a locker: the queues
	admitted *admission  // without one: the placements under way
	known    *productSet // products seen in Postgres
	lockDown atomic.Int64
}
