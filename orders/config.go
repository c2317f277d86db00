package orders

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quorumlock/quorumlock/orders/internal/metrics"
	"github.com/quorumlock/quorumlock/orders/internal/placement"
	"github.com/quorumlock/quorumlock/orders/internal/transport"
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
	// it is answered 503, having written nothing: short enough that a
	// client waiting 2s gets an answer, its own batch included.
	DefaultQueueWait = time.Second
	// DefaultSoldOutRecheck bounds how long a product Postgres reported
	// sold out is answered from that report before a transaction looks
	// again: a restock on another instance is seen within it.
	DefaultSoldOutRecheck = time.Second
)

// Fallback says what the service does when the lock cannot be taken.
type Fallback = placement.Fallback

// Fallback modes.
const (
	// FallbackDB lets Postgres arbitrate alone: the order transaction takes
	// its fence itself, and the conditional decrement still holds. The
	// default.
	FallbackDB = placement.FallbackDB
	// FallbackReject answers 503 with Retry-After.
	FallbackReject = placement.FallbackReject
)

// LockRule says which batches of orders take the stock lock.
type LockRule = placement.LockRule

// Lock rules.
const (
	// LockContended takes the lock for the batches of contended products
	// only: those with two requests on one instance at once, lately. A
	// quiet product's order goes in a batch of quiet orders for other
	// products, placed in one transaction with the fences Postgres takes
	// itself; its conditional decrement keeps it safe, and the lock would
	// add only its cost. The default.
	LockContended = placement.LockContended
	// LockAlways takes the lock for every batch.
	LockAlways = placement.LockAlways
)

// ParseLockRule reads a LockRule from configuration; "" is LockContended.
func ParseLockRule(s string) (LockRule, error) {
	switch r := LockRule(s); r {
	case LockContended, LockAlways:
		return r, nil
	case "":
		return LockContended, nil
	}
	return "", fmt.Errorf("%w: lock rule %q: want contended or always", ErrConfig, s)
}

// ParseFallback reads a Fallback from configuration; "" is FallbackDB.
func ParseFallback(s string) (Fallback, error) {
	switch f := Fallback(s); f {
	case FallbackDB, FallbackReject:
		return f, nil
	case "":
		return FallbackDB, nil
	}
	return "", fmt.Errorf("%w: lock fallback %q: want db or reject", ErrConfig, s)
}
