package transport

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/quorumlock/quorumlock/orders/problem"
	"github.com/quorumlock/quorumlock/orders/store"
)

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
