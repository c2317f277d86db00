package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Type is an event's type.
type Type string

// The event types the outbox trigger writes.
const (
	OrderCreated   Type = "order.created"
	OrderPaid      Type = "order.paid"
	OrderCancelled Type = "order.cancelled"
)

// DefaultStream is the Redis Stream of the order events.
const DefaultStream = "orders:events"

// ErrMalformed is wrapped by the error of a stream message that is not an
// event.
var ErrMalformed = errors.New("events: malformed message")

// ErrConfig is wrapped by every configuration error of the constructors.
var ErrConfig = errors.New("events: invalid configuration")

// Event is one order event, as the outbox stored it.
type Event struct {
	// ID is stable: the order id and the type ("ord_…/order.paid"). Every
	// copy of one change carries the same ID.
	ID        string
	Type      Type
	OrderID   string
	Payload   json.RawMessage // the order's fields at the change (see Order)
	CreatedAt time.Time       // when the change committed
	// StreamID is the Redis Stream entry id of this delivery; copies of one
	// event have different ones.
	StreamID string
}

// Order is the payload of every order event: the order at the change.
type Order struct {
	OrderID string `json:"orderId"`
	UserID  string `json:"userId"`
	// ProductID is a one-line order's product, "" for a cart.
	ProductID string `json:"productId"`
	// Quantity is the units of every line.
	Quantity    int64  `json:"quantity"`
	AmountCents int64  `json:"amountCents"`
	Status      string `json:"status"`
	// Lines are the order's products, sorted by id. Events written before
	// carts existed have none; OrderLines then gives the one line.
	Lines []Line `json:"lines,omitempty"`
}

// Line is one product of an order event.
type Line struct {
	ProductID   string `json:"productId"`
	Quantity    int64  `json:"quantity"`
	AmountCents int64  `json:"amountCents"`
}

// OrderLines returns the order's lines: Lines, or for an event without
// them, the one line its product and quantity name.
func (o Order) OrderLines() []Line {
	if len(o.Lines) > 0 || o.ProductID == "" {
		return o.Lines
	}
	return []Line{{ProductID: o.ProductID, Quantity: o.Quantity, AmountCents: o.AmountCents}}
}

// Order decodes the payload.
func (e Event) Order() (Order, error) {
	var o Order
	if err := json.Unmarshal(e.Payload, &o); err != nil {
		return Order{}, fmt.Errorf("%w: event %s: payload: %w", ErrMalformed, e.ID, err)
	}
	return o, nil
}

// Stream entry fields.
const (
	fieldID      = "event_id"
	fieldType    = "type"
	fieldOrder   = "order_id"
	fieldPayload = "payload"
	fieldCreated = "created_at"
)

// values are the fields of e's stream entry.
func (e Event) values() []any {
	return []any{fieldID, e.ID, fieldType, string(e.Type), fieldOrder, e.OrderID,
		fieldPayload, string(e.Payload), fieldCreated, e.CreatedAt.UTC().Format(time.RFC3339Nano)}
}

// parse reads an event from a stream entry.
func parse(m redis.XMessage) (Event, error) {
	str := func(k string) (string, error) {
		v, ok := m.Values[k].(string)
		if !ok || v == "" {
			return "", fmt.Errorf("%w: entry %s: no %s", ErrMalformed, m.ID, k)
		}
		return v, nil
	}
	e := Event{StreamID: m.ID}
	var err error
	var typ, payload, created string
	if e.ID, err = str(fieldID); err != nil {
		return Event{}, err
	}
	if typ, err = str(fieldType); err != nil {
		return Event{}, err
	}
	if e.OrderID, err = str(fieldOrder); err != nil {
		return Event{}, err
	}
	if payload, err = str(fieldPayload); err != nil {
		return Event{}, err
	}
	if !json.Valid([]byte(payload)) {
		return Event{}, fmt.Errorf("%w: entry %s: payload is not JSON", ErrMalformed, m.ID)
	}
	if created, err = str(fieldCreated); err != nil {
		return Event{}, err
	}
	if e.CreatedAt, err = time.Parse(time.RFC3339Nano, created); err != nil {
		return Event{}, fmt.Errorf("%w: entry %s: created_at: %w", ErrMalformed, m.ID, err)
	}
	e.Type, e.Payload = Type(typ), json.RawMessage(payload)
	return e, nil
}
