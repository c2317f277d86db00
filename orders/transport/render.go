package transport

import (
	"encoding/json"
	"net/http"
	"net/url"
	"time"

	"github.com/quorumlock/quorumlock/orders/answer"
	"github.com/quorumlock/quorumlock/orders/idem"
	"github.com/quorumlock/quorumlock/orders/problem"
	"github.com/quorumlock/quorumlock/orders/store"
)

// Headers of the HTTP contract.
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderReplayed       = "Idempotent-Replayed"
)

// Reply is a complete HTTP answer: status, headers and body bytes.
type Reply struct {
	Status int
	Header http.Header
	Body   []byte
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

// render turns a create's answer into its reply, with codes for the
// idempotency conflicts.
func (api *API) render(a answer.Answer, key string, codes Codes) Reply {
	switch a.Kind {
	case answer.Outcome:
		r := savedReply(answer.Saved(a.Out))
		if a.Out.Replayed {
			r.Header.Set(HeaderReplayed, "true")
		}
		return r
	case answer.Record:
		r := savedReply(*a.Record)
		r.Header.Set(HeaderReplayed, "true")
		return r
	case answer.InProgress:
		return api.inProgressReply(key, a.Wait, codes)
	case answer.KeyReused:
		if codes == CodesIETF {
			return problemReply(problem.KeyReused())
		}
		return problemReply(problem.FingerprintMismatch())
	case answer.UnknownProduct:
		return problemReply(problem.UnknownProduct(a.Product))
	case answer.Unavailable:
		return problemReply(problem.ServiceUnavailable(a.Detail, a.Wait))
	case answer.OutcomeUnknown:
		return problemReply(problem.OutcomeUnknown(a.Wait))
	case answer.BadKey:
		return problemReply(problem.InvalidIdempotencyKey(a.Detail))
	case answer.NoOutcome:
		return problemReply(problem.NotFound("no completed request with this Idempotency-Key; retry the POST with it"))
	}
	return problemReply(problem.Internal(a.Detail))
}

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

// savedReply is a saved answer as a reply: its content type follows from
// its status, for first answers and replays alike (a content type kept
// beside a snapshot is never sent back verbatim).
func savedReply(r idem.Response) Reply {
	rep := jsonReply(r.Status, r.Body)
	if r.Location != "" {
		rep.Header.Set("Location", r.Location)
	}
	return rep
}

// jsonReply is a status and a JSON body; the content type follows from the
// status (a problem for errors, plain JSON for successes).
func jsonReply(status int, body []byte) Reply {
	h := http.Header{}
	if status >= 400 {
		h.Set("Content-Type", problem.ContentType)
	} else {
		h.Set("Content-Type", "application/json")
	}
	return Reply{Status: status, Header: h, Body: body}
}

func problemReply(p problem.Problem) Reply {
	body, err := problem.Encode(p)
	if err != nil {
		body = []byte(`{"status":500,"title":"Internal Server Error"}`)
	}
	h := http.Header{}
	for k, v := range p.Header {
		h[k] = append([]string(nil), v...)
	}
	h.Set("Content-Type", problem.ContentType)
	return Reply{Status: problem.StatusOf(p), Header: h, Body: body}
}

// requestLocation is where a client polls a request still in progress.
// The key travels in the query, so keys such as ".." survive path cleaning.
func requestLocation(key string) string {
	return "/orders/requests?" + url.Values{"key": {key}}.Encode()
}

// inProgressReply answers a request whose key another attempt is
// processing: 202 with Retry-After and the Location to poll, or with
// CodesIETF a 409 problem with the same headers (a POST; the poll always
// answers 202).
func (api *API) inProgressReply(key string, lease time.Duration, codes Codes) Reply {
	wait := min(max(lease, time.Second), api.Retry)
	var r Reply
	if codes == CodesIETF {
		r = problemReply(problem.RequestInProgress(wait))
	} else {
		r = jsonReply(http.StatusAccepted, []byte(`{"status":"IN_PROGRESS"}`))
		r.Header.Set("Retry-After", problem.RetryAfter(wait))
	}
	r.Header.Set("Location", requestLocation(key))
	return r
}
