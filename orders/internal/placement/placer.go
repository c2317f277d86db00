// Package placement places the orders of the service: each request is a
// cart (a single-product order is a one-line cart). With a Locker the
// requests queue on this instance, in arrival order, and are placed in
// batches across products, each in one transaction: a batch of contended
// products (two of their requests here at once, lately) under one lease on
// their stock keys, a batch of quiet ones with the fences Postgres takes
// itself, as the lock would only add its cost there (LockAlways locks
// both). Without a Locker, each request runs its own transaction once
// admitted, and Postgres arbitrates alone.
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
	// Rule says which batches take the lock: LockContended (the zero
	// value) or LockAlways.
	Rule LockRule
	// Lanes is how many batches run at once on this instance (at least 2:
	// each kind, contended or not, keeps one).
	Lanes int
	// HotFor is how long a product stays contended after two of its
	// requests were here at once.
	HotFor time.Duration
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
