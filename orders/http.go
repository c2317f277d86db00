package orders

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/quorumlock/quorumlock/orders/auth"
	"github.com/quorumlock/quorumlock/orders/idem"
	"github.com/quorumlock/quorumlock/orders/payment"
	"github.com/quorumlock/quorumlock/orders/problem"
	"github.com/quorumlock/quorumlock/orders/request"
	"github.com/quorumlock/quorumlock/orders/store"
)

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
func (s *Service) Handler(v *auth.Verifier) http.Handler {
	mux := http.NewServeMux()
	route := func(pattern string, h func(ctx context.Context, user string, r *http.Request) Reply) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			reply := s.authed(r, v, h)
			write(w, reply, s.log)
			s.metrics.observe(pattern, reply.Status, time.Since(start).Seconds())
		})
	}
	route("POST /orders", s.handleCreate)
	route("GET /orders/{id}", s.handleGet)
	route("POST /orders/{id}/pay", s.handlePay)
	route("POST /orders/{id}/cancel", s.handleCancel)
	route("GET /orders/requests", s.handleRequest)
	mux.HandleFunc("POST /payments/callback", s.handleCallback)
	return mux
}

func (s *Service) authed(r *http.Request, v *auth.Verifier, h func(context.Context, string, *http.Request) Reply) Reply {
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

func (s *Service) handleCreate(ctx context.Context, user string, r *http.Request) Reply {
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
			s.log.Info("request body could not be read", "err", err)
			return problemReply(problem.InvalidRequest("", "the request body could not be read"))
		}
		var re *request.Error
		field := ""
		if errors.As(err, &re) {
			field = re.Field
		}
		return problemReply(problem.InvalidRequest(field, reason(err)))
	}
	return s.Create(ctx, user, key, o)
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
func (s *Service) own(ctx context.Context, user, id string) (store.Order, *Reply) {
	o, err := s.store.GetOrder(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrInvalid), err == nil && o.UserID != user:
		r := problemReply(problem.NotFound("no such order"))
		return o, &r
	case err != nil:
		s.log.Error("read order", "err", err)
		r := problemReply(problem.ServiceUnavailable("the order database is unavailable", s.retry))
		return o, &r
	}
	return o, nil
}

func (s *Service) handleGet(ctx context.Context, user string, r *http.Request) Reply {
	o, bad := s.own(ctx, user, r.PathValue("id"))
	if bad != nil {
		return *bad
	}
	return orderReply(http.StatusOK, o)
}

func (s *Service) handleCancel(ctx context.Context, user string, r *http.Request) Reply {
	if _, bad := s.own(ctx, user, r.PathValue("id")); bad != nil {
		return *bad
	}
	o, err := s.store.Cancel(ctx, r.PathValue("id"))
	for _, l := range o.Lines { // none unless this call gave them back
		s.Restocked(l.ProductID)
	}
	return s.transitionReply(o, err)
}

// Restocked tells the service that units of product came back to its
// stock (a cancelled or expired order): a sold-out report of this instance
// ends at once.
func (s *Service) Restocked(product string) {
	if s.queues != nil {
		s.queues.restocked(product)
	}
}

func (s *Service) handlePay(ctx context.Context, user string, r *http.Request) Reply {
	if s.payments == nil {
		return problemReply(problem.New(http.StatusNotImplemented, "payments-disabled", "Payments disabled", "this instance has no payment provider"))
	}
	if _, bad := s.own(ctx, user, r.PathValue("id")); bad != nil {
		return *bad
	}
	o, err := s.payments.Pay(ctx, r.PathValue("id"))
	var (
		pending *payment.PendingError
		failed  *payment.FailedError
	)
	switch {
	case err == nil:
		return payReply(http.StatusOK, o, payView{Status: string(store.PaymentSucceeded)})
	case errors.As(err, &pending):
		rep := payReply(http.StatusAccepted, o, payView{Status: string(store.PaymentPending), Reason: pending.Reason})
		rep.Header.Set("Retry-After", problem.RetryAfter(s.retry))
		if pending.Cause != nil {
			s.log.Warn("payment still open", "order_id", o.ID, "reason", pending.Reason, "err", pending.Cause)
		}
		return rep
	case errors.As(err, &failed):
		// The order is PAYMENT_FAILED: cancel it, or the reaper will.
		return payReply(http.StatusOK, o, payView{Status: string(store.PaymentFailed), Reason: failed.Reason})
	}
	return s.transitionReply(o, err)
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

func (s *Service) transitionReply(o store.Order, err error) Reply {
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
	s.log.Error("order transition", "err", err)
	return problemReply(problem.ServiceUnavailable("the order database is unavailable", s.retry))
}

// handleRequest answers the saved outcome of a create request, for clients
// that got 202: the saved status and body; 202 again while an attempt holds
// its processing lease; 404 when no attempt left an outcome. Postgres is
// asked whenever Redis has no final answer, and a found outcome repairs the
// Redis record.
func (s *Service) handleRequest(ctx context.Context, user string, r *http.Request) Reply {
	key, err := request.ParseKey(r.URL.Query().Get("key"))
	if err != nil {
		return problemReply(problem.InvalidIdempotencyKey(reason(err)))
	}
	k, err := idem.NewKey(user, key)
	if err != nil {
		s.log.Error("idempotency key refused", "err", err)
		return problemReply(problem.Internal("the request could not be keyed"))
	}
	var rec idem.Record
	haveRec := false
	if s.idem != nil {
		if rec, err = s.idem.Get(ctx, k); err == nil {
			haveRec = true
			if rec.State == idem.StateSuccess && rec.Response != nil {
				return s.render(answer{kind: kindRecord, record: rec.Response}, key.String())
			}
		}
	}
	out, err := s.store.Lookup(ctx, user, key)
	switch {
	case err == nil:
		rep := s.render(answer{kind: kindOutcome, out: out}, key.String())
		if haveRec {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			if err := s.idem.Repair(rctx, k, out.Fingerprint, rep.saved()); err != nil {
				s.log.Warn("poll: repair of the idempotency record failed", "err", err)
			}
			cancel()
		}
		return rep
	case !errors.Is(err, store.ErrNotFound):
		return problemReply(problem.ServiceUnavailable("the order database is unavailable", s.retry))
	case haveRec && rec.State == idem.StateInProgress && rec.LeaseLeft > 0:
		// LeaseLeft is measured on the node's clock, so a skew between
		// this host and the node does not turn a live attempt into a 404.
		return s.inProgressReply(key.String(), rec.LeaseLeft, CodesSeed)
	}
	return problemReply(problem.NotFound("no completed request with this Idempotency-Key; retry the POST with it"))
}
