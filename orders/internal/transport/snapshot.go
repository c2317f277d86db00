package transport

import (
	"encoding/json"
	"net/http"

	"github.com/quorumlock/quorumlock/orders/problem"
	"github.com/quorumlock/quorumlock/orders/store"
)

// Snapshot renders the answer saved with a new outcome, and replayed byte
// for byte: 201 with the order's fields in a fixed order, or the
// out-of-stock problem (of a cart, naming its short lines). The store
// calls it inside the transaction.
func Snapshot(o store.Outcome) store.Snapshot {
	var (
		body []byte
		err  error
	)
	switch {
	case o.Kind == store.OutcomeOrder:
		b := createdBody{OrderID: o.Order.ID, Status: string(store.StatusCreated), ProductID: o.ProductID, Quantity: int(o.Quantity)}
		if o.ProductID == "" {
			b.Items = itemsOf(o.Order.Lines)
		}
		if body, err = json.Marshal(b); err != nil {
			panic(err) // strings and ints always marshal
		}
		return store.Snapshot{Status: http.StatusCreated, Body: body}
	case o.ProductID == "":
		p := problem.CartOutOfStock(shortItems(o.Short))
		body, err = problem.Encode(p)
	default:
		body, err = problem.Encode(problem.OutOfStock(o.ProductID, int(o.Quantity)))
	}
	if err != nil {
		panic(err) // strings and ints always marshal
	}
	return store.Snapshot{Status: http.StatusConflict, Body: body}
}

// createdBody is the 201 body: the fields the HTTP contract names, in a
// fixed order, so a replay is byte-identical. A single-product order names
// its product; a cart, its items.
type createdBody struct {
	OrderID   string     `json:"orderId"`
	Status    string     `json:"status"`
	ProductID string     `json:"productId,omitempty"`
	Quantity  int        `json:"quantity"`
	Items     []itemView `json:"items,omitempty"`
}

// itemView is one line of a cart in a response.
type itemView struct {
	ProductID   string `json:"productId"`
	Quantity    int64  `json:"quantity"`
	AmountCents int64  `json:"amountCents"`
}

func itemsOf(lines []store.Line) []itemView {
	out := make([]itemView, len(lines))
	for i, l := range lines {
		out[i] = itemView{ProductID: l.ProductID, Quantity: l.Quantity, AmountCents: l.AmountCents}
	}
	return out
}

func shortItems(short []store.ShortLine) []problem.ShortItem {
	out := make([]problem.ShortItem, len(short))
	for i, l := range short {
		out[i] = problem.ShortItem{ProductID: l.ProductID, Quantity: l.Quantity, Available: l.Available}
	}
	return out
}
