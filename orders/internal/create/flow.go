// Package create is the create flow of the order service: the request's
// idempotency claim in Redis, its placement, and the settling of the claim
// with the answer. It decides an answer.Answer; the transport renders it.
package create

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/quorumlock/quorumlock/internal/failpoint"
	"github.com/quorumlock/quorumlock/orders/idem"
	"github.com/quorumlock/quorumlock/orders/internal/answer"
	"github.com/quorumlock/quorumlock/orders/internal/metrics"
	"github.com/quorumlock/quorumlock/orders/internal/placement"
	"github.com/quorumlock/quorumlock/orders/store"
)

// ErrConfig is wrapped by the configuration errors of New.
var ErrConfig = errors.New("create: invalid configuration")

// Config is what a Flow is built with; the order service fills it from its
// options.
type Config struct {
	// Idem is the Redis fast path of the claims; nil: Postgres arbitrates
	// every request alone, and still answers replays.
	Idem *idem.Store
	// Retry is the Retry-After of 503 answers.
	Retry time.Duration
	// Budget bounds the placing of one request: less than the claim's
	// processing lease, so a retry never takes over a request still
	// running.
	Budget     time.Duration
	Metrics    *metrics.Metrics
	Log        *slog.Logger
	Failpoints *failpoint.Set
}

// Flow decides create requests. It is safe for concurrent use.
type Flow struct {
	Config
	st     *store.Store
	placer *placement.Placer
}

// New returns a flow that places orders with placer and asks st for the
// outcomes of earlier attempts.
func New(st *store.Store, placer *placement.Placer, c Config) (*Flow, error) {
	if st == nil || placer == nil || c.Log == nil || c.Retry <= 0 || c.Budget <= 0 {
		return nil, fmt.Errorf("%w: a store, a placer, a logger, a retry and a budget are required", ErrConfig)
	}
	return &Flow{Config: c, st: st, placer: placer}, nil
}

// Log is what one create request did, for its log line: the claim and the
// placement.
type Log struct {
	Idem     string         // the idempotency claim's outcome, "UNAVAILABLE", or "off"
	Verdict  answer.Verdict // what the claim's record became
	Place    placement.Log
	claimKey idem.Key // the claim's record
	owner    string   // this attempt's owner of the record
	claimed  bool     // the record is this attempt's to settle
}
