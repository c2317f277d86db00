// Package transport is the HTTP side of the order service: the routes,
// the parsing of requests, and the rendering of every answer. It hands a
// create request to the create flow and renders the answer that comes
// back; reading, cancelling and paying go to the store and the payment
// service. Its files point one way: the routes over the handlers, over
// the rendering, over the API's configuration and the replies.
package transport

import (
	"errors"
	"log/slog"
	"time"

	"github.com/quorumlock/quorumlock/orders/internal/create"
	"github.com/quorumlock/quorumlock/orders/internal/metrics"
	"github.com/quorumlock/quorumlock/orders/payment"
	"github.com/quorumlock/quorumlock/orders/store"
)

// Config is what an API is built with; the order service fills it from
// its options.
type Config struct {
	// Flow decides create requests.
	Flow *create.Flow
	// Store reads and moves orders.
	Store *store.Store
	// Payments enables POST /orders/{id}/pay; nil answers 501.
	Payments *payment.Service
	// Restocked is told of each product whose units a cancel gave back.
	Restocked func(product string)
	// Codes are the status codes of the idempotency conflicts.
	Codes Codes
	// Retry is the Retry-After of 503 answers.
	Retry time.Duration
	// Deadline bounds one request of every route but POST /orders, whose
	// flow has its own budget; 0 leaves them unbounded.
	Deadline time.Duration
	// CallbackSecret and CallbackTolerance check provider callbacks; no
	// secret answers 404 on their route.
	CallbackSecret    []byte
	CallbackTolerance time.Duration
	Metrics           *metrics.Metrics
	Log               *slog.Logger
}

// API serves the order API.
type API struct{ Config }

// New returns the API of c.
func New(c Config) (*API, error) {
	if c.Flow == nil || c.Store == nil || c.Restocked == nil || c.Log == nil || c.Retry <= 0 {
		return nil, errors.New("transport: a flow, a store, a restock hook, a logger and a retry are required")
	}
	return &API{Config: c}, nil
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
