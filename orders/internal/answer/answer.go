// Package answer is what a create request came to, as the layers of the
// order service hand it up: placement and the create flow decide an
// Answer, the transport renders it. It also says what an answer means for
// the request's idempotency record.
package answer

import (
	"net/http"
	"net/url"
	"time"

	"github.com/quorumlock/quorumlock/orders/idem"
	"github.com/quorumlock/quorumlock/orders/problem"
	"github.com/quorumlock/quorumlock/orders/store"
)

// Kind is what a create request ended with.
type Kind uint8

// Kinds of answers.
const (
	// Outcome: an order or a saved rejection, new or replayed, whose saved
	// snapshot is the answer.
	Outcome Kind = iota + 1
	// Record: the Redis record's saved answer, replayed.
	Record
	// InProgress: another attempt with the key is under way.
	InProgress
	// KeyReused: the key was used for another request.
	KeyReused
	// UnknownProduct: no such product; nothing written.
	UnknownProduct
	// Unavailable: 503, nothing written; a retry proceeds.
	Unavailable
	// OutcomeUnknown: 503, the outcome of an earlier attempt is in doubt;
	// the next attempt asks Postgres first.
	OutcomeUnknown
	// Internal: 500, a wiring fault.
	Internal
	// BadKey: 400, the Idempotency-Key is missing or invalid.
	BadKey
	// NoOutcome: 404 to a poll, no attempt left an outcome.
	NoOutcome
)

// Answer is the typed result of a create request.
type Answer struct {
	Kind    Kind
	Out     store.Outcome  // Outcome
	Record  *idem.Response // Record
	Wait    time.Duration  // Retry-After: in progress, unavailable, unknown
	Detail  string         // why: unavailable, internal, bad key
	Product string         // UnknownProduct
}

// Verdict says what an answer means for the idempotency record.
type Verdict int

// Verdicts.
const (
	// Retryable: nothing was saved; drop the claim so a retry proceeds.
	Retryable Verdict = iota
	// Final: the saved answer of (user, key); record it in Redis.
	Final
	// Unknown: the outcome is in doubt; keep the claim, so the attempt
	// after its lease expires asks Postgres first.
	Unknown
)

// String names the verdict for the logs.
func (v Verdict) String() string {
	switch v {
	case Final:
		return "final"
	case Unknown:
		return "unknown"
	}
	return "retryable"
}

// Saved is an outcome's snapshot as the idempotency record keeps it and
// as it is sent: its status, its content type (which follows from the
// status: a problem for errors, plain JSON for successes), its body and,
// for a created order, its Location.
func Saved(o store.Outcome) idem.Response {
	ct := "application/json"
	if o.ResponseStatus >= 400 {
		ct = problem.ContentType
	}
	return idem.Response{Status: o.ResponseStatus, ContentType: ct, Body: o.ResponseBody, Location: orderLocation(o)}
}

// orderLocation is the Location of a created order's 201.
func orderLocation(o store.Outcome) string {
	if o.Kind != store.OutcomeOrder || o.Order.ID == "" || o.ResponseStatus != http.StatusCreated {
		return ""
	}
	return "/orders/" + url.PathEscape(o.Order.ID)
}
