package transport

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/quorumlock/quorumlock/orders/payment"
	"github.com/quorumlock/quorumlock/orders/problem"
	"github.com/quorumlock/quorumlock/orders/store"
)

// Callback limits.
const (
	// MaxCallbackBody is the largest callback body read.
	MaxCallbackBody = 64 << 10
	// DefaultCallbackTolerance is how far a callback's signed timestamp may
	// be from this host's clock.
	DefaultCallbackTolerance = 5 * time.Minute
)

// callbackView is the answer to a callback.
type callbackView struct {
	EventID string `json:"event_id"`
	OrderID string `json:"order_id"`
	Status  string `json:"status"`
	Applied bool   `json:"applied"`
}

// handleCallback settles a payment from a provider callback: POST
// /payments/callback, authenticated by the provider's HMAC signature (not a
// user token). Each event id settles its payment once: the first delivery
// answers 200 with applied true, a replay 200 with applied false, and
// neither charges anything. A forged or stale signature answers 401, a
// callback that contradicts the settled payment or reuses an event id with
// other content 409, an unknown payment 404, bad content 400; none of them
// changes anything.
func (api *API) handleCallback(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	reply := api.callback(r)
	write(w, reply, api.Log)
	api.Metrics.Observe("POST /payments/callback", reply.Status, time.Since(start).Seconds())
}

func (api *API) callback(r *http.Request) Reply {
	if api.Payments == nil || len(api.CallbackSecret) == 0 {
		return problemReply(problem.NotFound("this instance takes no payment callbacks"))
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, MaxCallbackBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return problemReply(problem.New(http.StatusRequestEntityTooLarge, "body-too-large", "Callback too large", "the callback body is over 64 KiB"))
		}
		return problemReply(problem.New(http.StatusBadRequest, "bad-callback", "Bad callback", "the callback body could not be read"))
	}
	if err := payment.VerifyCallback(api.CallbackSecret, r.Header.Get(payment.SignatureHeader), body, time.Now(), api.CallbackTolerance); err != nil {
		return problemReply(problem.Unauthorized("the callback signature is missing, wrong or too old"))
	}
	var ev payment.Event
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ev); err != nil || ev.ID == "" || ev.PaymentRequestID == "" {
		return problemReply(problem.New(http.StatusBadRequest, "bad-callback", "Bad callback", "the callback is not an event with event_id, payment_request_id and status"))
	}
	o, applied, err := api.Payments.ApplyEvent(r.Context(), ev)
	switch {
	case err == nil:
		api.Log.Info("payment callback", "event_id", ev.ID, "payment_request_id", ev.PaymentRequestID, "status", ev.Status, "applied", applied, "order_status", o.Status)
		body, _ := json.Marshal(callbackView{EventID: ev.ID, OrderID: o.ID, Status: string(o.Status), Applied: applied})
		return jsonReply(http.StatusOK, body)
	case errors.Is(err, store.ErrNotFound):
		return problemReply(problem.NotFound("no payment with this payment_request_id"))
	case errors.Is(err, store.ErrPaymentConflict), errors.Is(err, store.ErrEventConflict):
		api.Log.Warn("payment callback refused", "event_id", ev.ID, "payment_request_id", ev.PaymentRequestID, "err", err)
		return problemReply(problem.New(http.StatusConflict, "callback-conflict", "Callback conflicts with the recorded payment", err.Error()))
	case errors.Is(err, store.ErrInvalid):
		return problemReply(problem.New(http.StatusBadRequest, "bad-callback", "Bad callback", err.Error()))
	}
	api.Log.Error("payment callback", "event_id", ev.ID, "err", err)
	return problemReply(problem.ServiceUnavailable("the order database is unavailable", api.Retry))
}
