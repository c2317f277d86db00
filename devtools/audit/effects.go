package audit

import (
	"fmt"
	"slices"
	"strings"
)

// The checks of [Effects], as [Violation.Check] names them.
const (
	// CheckEffectHasOrder: every effect names an order of the orders table.
	CheckEffectHasOrder = "effect_has_order"
	// CheckOneChargePerOrder: no order was charged more than once.
	CheckOneChargePerOrder = "one_charge_per_order"
)

// The kinds of effect [Effects] knows.
const (
	// EffectEvent is an order event found in the stream (order.created,
	// order.paid, ...): the outbox publishes it only after its
	// transaction committed.
	EffectEvent = "event"
	// EffectShipped is an order.paid event a consumer (the shipper) has
	// acknowledged: the goods went out.
	EffectShipped = "shipped"
	// EffectCharge is a succeeded charge at the payment provider.
	EffectCharge = "charge"
)

// Effect is one thing done outside the orders table on an order's behalf.
type Effect struct {
	// Kind is one of EffectEvent, EffectShipped and EffectCharge.
	Kind string
	// OrderID is the order it was done for.
	OrderID string
	// Ref names it for a report: the event's stream id and type, the
	// charge's payment request id.
	Ref string
}

// Effects judges the effects of a run against the orders table at its
// end: each must name an order that exists (an event, a shipment or a
// charge for an order the database no longer holds is an orphan: its
// transaction was answered and acted on, then lost), and each order has at
// most one charge.
func Effects(rows []OrderRow, effects []Effect) Report {
	r := Report{Checked: len(rows) + len(effects), Rows: len(rows), Answers: len(effects),
		checks: []string{CheckEffectHasOrder, CheckOneChargePerOrder}, answers: "effect"}
	ids := make(map[string]bool, len(rows))
	for _, o := range rows {
		ids[o.OrderID] = true
	}
	orphans := map[string][]string{}
	charges := map[string][]string{}
	for _, e := range effects {
		if !ids[e.OrderID] {
			orphans[e.Kind] = append(orphans[e.Kind], e.OrderID+" ("+e.Ref+")")
		}
		if e.Kind == EffectCharge {
			charges[e.OrderID] = append(charges[e.OrderID], e.Ref)
		}
	}
	for _, kind := range sortedKeys(orphans, strings.Compare) {
		list := orphans[kind]
		slices.Sort(list)
		r.add(CheckEffectHasOrder, "%s: %d for orders not in the table: %s", kind, len(list), strings.Join(list, ", "))
	}
	for _, id := range sortedKeys(charges, strings.Compare) {
		if refs := charges[id]; len(refs) > 1 {
			r.add(CheckOneChargePerOrder, "order %s charged %d times: %v", id, len(refs), refs)
		}
	}
	return r
}

// EffectKinds counts the effects of each kind, for reports ("charge:3
// event:12 shipped:2"), kinds in alphabetical order.
func EffectKinds(effects []Effect) string {
	c := map[string]int{}
	for _, e := range effects {
		c[e.Kind]++
	}
	parts := make([]string, 0, len(c))
	for _, k := range sortedKeys(c, strings.Compare) {
		parts = append(parts, fmt.Sprintf("%s:%d", k, c[k]))
	}
	return strings.Join(parts, " ")
}
