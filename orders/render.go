package orders

import (
	"encoding/json"
	"net/http"
	"net/url"
	"time"

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

// answerKind is what a create request ended with.
type answerKind uint8

const (
	// kindOutcome: an order or a saved rejection, new or replayed, whose
	// saved snapshot is the answer.
	kindOutcome answerKind = iota + 1
	// kindRecord: the Redis record's saved answer, replayed.
	kindRecord
	// kindInProgress: another attempt with the key is under way.
	kindInProgress
	// kindKeyReused: the key was used for another request.
	kindKeyReused
	// kindUnknownProduct: no such product; nothing written.
	kindUnknownProduct
	// kindUnavailable: 503, nothing written; a retry proceeds.
	kindUnavailable
	// kindOutcomeUnknown: 503, the outcome of an earlier attempt is in
	// doubt; the next attempt asks Postgres first.
	kindOutcomeUnknown
	// kindInternal: 500, a wiring fault.
	kindInternal
	// kindBadKey: 400, the Idempotency-Key is missing or invalid.
	kindBadKey
)

// answer is the typed result of a create request, rendered by render: the
// one place a create's outcome becomes a response.
type answer struct {
	kind    answerKind
	out     store.Outcome  // kindOutcome
	record  *idem.Response // kindRecord
	wait    time.Duration  // Retry-After: in progress, unavailable, unknown
	detail  string         // why: unavailable, internal, bad key
	product string         // kindUnknownProduct
}

// render turns a create's answer into its reply.
func (s *Service) render(a answer, key string) Reply {
	switch a.kind {
	case kindOutcome:
		r := snapshotReply(a.out.ResponseStatus, a.out.ResponseBody, orderLocation(a.out))
		if a.out.Replayed {
			r.Header.Set(HeaderReplayed, "true")
		}
		return r
	case kindRecord:
		r := snapshotReply(a.record.Status, a.record.Body, a.record.Location)
		r.Header.Set(HeaderReplayed, "true")
		return r
	case kindInProgress:
		return s.inProgressReply(key, a.wait, s.codes)
	case kindKeyReused:
		if s.codes == CodesIETF {
			return problemReply(problem.KeyReused())
		}
		return problemReply(problem.FingerprintMismatch())
	case kindUnknownProduct:
		return problemReply(problem.UnknownProduct(a.product))
	case kindUnavailable:
		return problemReply(problem.ServiceUnavailable(a.detail, a.wait))
	case kindOutcomeUnknown:
		return problemReply(problem.OutcomeUnknown(a.wait))
	case kindBadKey:
		return problemReply(problem.InvalidIdempotencyKey(a.detail))
	}
	return problemReply(problem.Internal(a.detail))
}

// orderLocation is where a created order lives: its id, never parsed back
// from a body.
func orderLocation(o store.Outcome) string {
	if o.Kind != store.OutcomeOrder || o.Order.ID == "" || o.ResponseStatus != http.StatusCreated {
		return ""
	}
	return "/orders/" + url.PathEscape(o.Order.ID)
}

// snapshot renders the answer saved with a new outcome, and replayed byte
// for byte: 201 with the order's fields in a fixed order, or the
// out-of-stock problem (of a cart, naming its short lines). The store
// calls it inside the transaction.
func snapshot(o store.Outcome) store.Snapshot {
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

// snapshotReply is a saved snapshot as a reply: its content type follows
// from its status, for first answers and replays alike (a content type
// kept beside a snapshot is never sent back verbatim).
func snapshotReply(status int, body []byte, location string) Reply {
	r := jsonReply(status, body)
	if location != "" {
		r.Header.Set("Location", location)
	}
	return r
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

// saved is the idempotency record's copy of a reply.
func (r Reply) saved() idem.Response {
	return idem.Response{Status: r.Status, ContentType: r.Header.Get("Content-Type"), Body: r.Body, Location: r.Header.Get("Location")}
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
func (s *Service) inProgressReply(key string, lease time.Duration, codes Codes) Reply {
	wait := min(max(lease, time.Second), s.retry)
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
