package transport

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/quorumlock/quorumlock/orders/payment"
	"github.com/quorumlock/quorumlock/orders/problem"
	"github.com/quorumlock/quorumlock/orders/store"
)

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
