package transport

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/quorumlock/quorumlock/orders/auth"
	"github.com/quorumlock/quorumlock/orders/problem"
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
	route("GET /orders/{id}", api.bounded(api.handleGet))
	route("POST /orders/{id}/pay", api.bounded(api.handlePay))
	route("POST /orders/{id}/cancel", api.bounded(api.handleCancel))
	route("GET /orders/requests", api.bounded(api.handleRequest))
	mux.HandleFunc("POST /payments/callback", func(w http.ResponseWriter, r *http.Request) {
		if api.Deadline > 0 {
			ctx, cancel := context.WithTimeout(r.Context(), api.Deadline)
			defer cancel()
			r = r.WithContext(ctx)
		}
		api.handleCallback(w, r)
	})
	return mux
}

// bounded runs h within the Deadline: a database that does not answer
// ends in a 503 with Retry-After, not in a client left waiting.
func (api *API) bounded(h func(ctx context.Context, user string, r *http.Request) Reply) func(context.Context, string, *http.Request) Reply {
	if api.Deadline <= 0 {
		return h
	}
	return func(ctx context.Context, user string, r *http.Request) Reply {
		ctx, cancel := context.WithTimeout(ctx, api.Deadline)
		defer cancel()
		return h(ctx, user, r)
	}
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
