// Package transport is the HTTP side of the order service: the routes,
// the parsing of requests, and the rendering of every answer. It hands a
// create request to the create flow and renders the answer that comes
// back; reading, cancelling and paying go to the store and the payment
// service.
package transport

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/quorumlock/quorumlock/orders/auth"
	"github.com/quorumlock/quorumlock/orders/create"
	"github.com/quorumlock/quorumlock/orders/metrics"
	"github.com/quorumlock/quorumlock/orders/payment"
	"github.com/quorumlock/quorumlock/orders/problem"
	"github.com/quorumlock/quorumlock/orders/request"
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

// Handler serves the order API:
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
func (api *API) Handler(v *auth.Verifier) http.Handler {
	mux := http.NewServeMux()
	route := func(pattern string, h func(ctx context.Context, user string, r *http.Request) Reply) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			reply := authed(r, v, h)
			write(w, reply, api.Log)
			api.Metrics.Observe(pattern, reply.Status, time.Since(start).Seconds())
		})
	}
	route("POST /orders", api.handleCreate)
	route("GET /orders/{id}", api.handleGet)
	route("POST /orders/{id}/pay", api.handlePay)
	route("POST /orders/{id}/cancel", api.handleCancel)
	route("GET /orders/requests", api.handleRequest)
	mux.HandleFunc("POST /payments/callback", api.handleCallback)
	return mux
}

func authed(r *http.Request, v *auth.Verifier, h func(context.Context, string, *http.Request) Reply) Reply {
	user, err := v.Verify(r.Context(), r.Header.Get("Authorization"))
	if err != nil {
		detail := "a valid bearer token is required"
		switch {
		case errors.Is(err, auth.ErrMissingToken):
			detail = "the Authorization header with a bearer token is missing"
		case errors.Is(err, auth.ErrExpiredToken):
			detail = "the bearer token has expired"
		}
		rep := problemReply(problem.Unauthorized(detail))
		rep.Header.Set("WWW-Authenticate", `Bearer realm="orders"`)
		return rep
	}
	return h(r.Context(), user, r)
}

func write(w http.ResponseWriter, r Reply, log *slog.Logger) {
	for k, v := range r.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(r.Status)
	if _, err := w.Write(r.Body); err != nil {
		log.Debug("write response", "err", err)
	}
}

// handleCreate parses a create request, hands it to the create flow, and
// renders and logs the answer.
func (api *API) handleCreate(ctx context.Context, user string, r *http.Request) Reply {
	key, err := request.IdempotencyKey(r.Header)
	if err != nil {
		return problemReply(problem.InvalidIdempotencyKey(reason(err)))
	}
	o, err := request.Parse(r.Body)
	if err != nil {
		if errors.Is(err, request.ErrTooLarge) {
			return problemReply(problem.PayloadTooLarge(request.MaxBodyBytes))
		}
		if errors.Is(err, request.ErrRead) {
			// The read error names socket addresses: log it, answer
			// without it.
			api.Log.Info("request body could not be read", "err", err)
			return problemReply(problem.InvalidRequest("", "the request body could not be read"))
		}
		var re *request.Error
		field := ""
		if errors.As(err, &re) {
			field = re.Field
		}
		return problemReply(problem.InvalidRequest(field, reason(err)))
	}
	start := time.Now()
	a, l := api.Flow.Create(ctx, user, key, o)
	rep := api.render(a, key.String(), api.Codes)
	api.logRequest(ctx, l, user, key, o, rep, time.Since(start))
	return rep
}

func reason(err error) string {
	var re *request.Error
	if errors.As(err, &re) && re.Reason != "" {
		return re.Reason
	}
	return err.Error()
}

// orderView is the JSON form of an order: a single-product order names
// its product, a cart its items.
type orderView struct {
	OrderID     string     `json:"orderId"`
	Status      string     `json:"status"`
	ProductID   string     `json:"productId,omitempty"`
	Quantity    int64      `json:"quantity"`
	AmountCents int64      `json:"amountCents"`
	Items       []itemView `json:"items,omitempty"`
	CreatedAt   time.Time  `json:"createdAt"`
	UpdatedAt   time.Time  `json:"updatedAt"`
}

func viewOf(o store.Order) orderView {
	v := orderView{
		OrderID: o.ID, Status: string(o.Status), ProductID: o.ProductID, Quantity: o.Quantity,
		AmountCents: o.AmountCents, CreatedAt: o.CreatedAt.UTC(), UpdatedAt: o.UpdatedAt.UTC(),
	}
	if o.ProductID == "" {
		v.Items = itemsOf(o.Lines)
	}
	return v
}

func orderReply(status int, o store.Order) Reply {
	body, _ := json.Marshal(viewOf(o))
	return jsonReply(status, body)
}

// own reads an order and checks it belongs to user; another user's order
// is reported as not found, so ids do not leak.
func (api *API) own(ctx context.Context, user, id string) (store.Order, *Reply) {
	o, err := api.Store.GetOrder(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrInvalid), err == nil && o.UserID != user:
		r := problemReply(problem.NotFound("no such order"))
		return o, &r
	case err != nil:
		api.Log.Error("read order", "err", err)
		r := problemReply(problem.ServiceUnavailable("the order database is unavailable", api.Retry))
		return o, &r
	}
	return o, nil
}

func (api *API) handleGet(ctx context.Context, user string, r *http.Request) Reply {
	o, bad := api.own(ctx, user, r.PathValue("id"))
	if bad != nil {
		return *bad
	}
	return orderReply(http.StatusOK, o)
}

func (api *API) handleCancel(ctx context.Context, user string, r *http.Request) Reply {
	if _, bad := api.own(ctx, user, r.PathValue("id")); bad != nil {
		return *bad
	}
	o, err := api.Store.Cancel(ctx, r.PathValue("id"))
	for _, l := range o.Lines { // none unless this call gave them back
		api.Restocked(l.ProductID)
	}
	return api.transitionReply(o, err)
}

func (api *API) handlePay(ctx context.Context, user string, r *http.Request) Reply {
	if api.Payments == nil {
		return problemReply(problem.New(http.StatusNotImplemented, "payments-disabled", "Payments disabled", "this instance has no payment provider"))
	}
	if _, bad := api.own(ctx, user, r.PathValue("id")); bad != nil {
		return *bad
	}
	o, err := api.Payments.Pay(ctx, r.PathValue("id"))
	var (
		pending *payment.PendingError
		failed  *payment.FailedError
	)
	switch {
	case err == nil:
		return payReply(http.StatusOK, o, payView{Status: string(store.PaymentSucceeded)})
	case errors.As(err, &pending):
		rep := payReply(http.StatusAccepted, o, payView{Status: string(store.PaymentPending), Reason: pending.Reason})
		rep.Header.Set("Retry-After", problem.RetryAfter(api.Retry))
		if pending.Cause != nil {
			api.Log.Warn("payment still open", "order_id", o.ID, "reason", pending.Reason, "err", pending.Cause)
		}
		return rep
	case errors.As(err, &failed):
		// The order is PAYMENT_FAILED: cancel it, or the reaper will.
		return payReply(http.StatusOK, o, payView{Status: string(store.PaymentFailed), Reason: failed.Reason})
	}
	return api.transitionReply(o, err)
}

// payView is the payment part of a pay answer: its status and, while it is
// open or once it failed for a reason other than a decline, why.
type payView struct {
	RequestID string `json:"paymentRequestId"`
	Status    string `json:"status"`
	Reason    string `json:"reason,omitempty"`
}

// payReply is the answer to a pay: the order and its payment.
func payReply(status int, o store.Order, p payView) Reply {
	p.RequestID = payment.RequestID(o.ID)
	body, _ := json.Marshal(struct {
		orderView
		Payment payView `json:"payment"`
	}{viewOf(o), p})
	return jsonReply(status, body)
}

func (api *API) transitionReply(o store.Order, err error) Reply {
	var te *store.TransitionError
	switch {
	case err == nil:
		return orderReply(http.StatusOK, o)
	case errors.As(err, &te):
		return problemReply(problem.New(http.StatusConflict, "invalid-transition", "Invalid state transition", te.Error()).
			With("currentStatus", string(te.Current)))
	case errors.Is(err, store.ErrInvalidTransition):
		return problemReply(problem.New(http.StatusConflict, "invalid-transition", "Invalid state transition", err.Error()))
	case errors.Is(err, store.ErrNotFound):
		return problemReply(problem.NotFound("no such order"))
	}
	api.Log.Error("order transition", "err", err)
	return problemReply(problem.ServiceUnavailable("the order database is unavailable", api.Retry))
}

// handleRequest answers the saved outcome of a create request, for clients
// that got 202: the saved status and body; 202 again while an attempt holds
// its processing lease; 404 when no attempt left an outcome (see
// create.Flow.Poll).
func (api *API) handleRequest(ctx context.Context, user string, r *http.Request) Reply {
	key, err := request.ParseKey(r.URL.Query().Get("key"))
	if err != nil {
		return problemReply(problem.InvalidIdempotencyKey(reason(err)))
	}
	// The poll always answers an attempt in flight with 202.
	return api.render(api.Flow.Poll(ctx, user, key), key.String(), CodesSeed)
}
