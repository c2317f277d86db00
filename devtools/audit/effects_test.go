package audit_test

import (
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/devtools/audit"
)

// effectsRun is a clean run's effects: two orders, each created, one paid,
// charged once and shipped.
func effectsRun() ([]audit.OrderRow, []audit.Effect) {
	rows := []audit.OrderRow{
		{OrderID: "o1", UserID: "u1", IdempotencyKey: "k1", ProductID: "42", Quantity: 1, Status: "PAID"},
		{OrderID: "o2", UserID: "u2", IdempotencyKey: "k2", ProductID: "42", Quantity: 1, Status: "CREATED"},
	}
	effects := []audit.Effect{
		{Kind: audit.EffectEvent, OrderID: "o1", Ref: "1-0 order.created"},
		{Kind: audit.EffectEvent, OrderID: "o2", Ref: "2-0 order.created"},
		{Kind: audit.EffectEvent, OrderID: "o1", Ref: "3-0 order.paid"},
		{Kind: audit.EffectCharge, OrderID: "o1", Ref: "o1:pay"},
		{Kind: audit.EffectShipped, OrderID: "o1", Ref: "3-0"},
	}
	return rows, effects
}

func TestEffectsAcceptsCleanRun(t *testing.T) {
	rows, effects := effectsRun()
	r := audit.Effects(rows, effects)
	if !r.OK() || r.Checked != 7 {
		t.Fatalf("clean run judged %v", r)
	}
	if want := "effect_has_order, one_charge_per_order over 2 order rows and 5 effects: no violations"; r.String() != want {
		t.Fatalf("String() = %q, want %q", r.String(), want)
	}
	if got := audit.EffectKinds(effects); got != "charge:1 event:3 shipped:1" {
		t.Fatalf("EffectKinds = %q", got)
	}
}

// Negative controls: an order lost after its events went out, after it was
// shipped, after it was charged; and a second charge.
func TestEffectsCatchesViolations(t *testing.T) {
	for _, tc := range []struct {
		name, check, want string
		mutate            func(*[]audit.OrderRow, *[]audit.Effect)
	}{
		{"order lost after its event", audit.CheckEffectHasOrder, "event: 2 for orders not in the table", func(rows *[]audit.OrderRow, _ *[]audit.Effect) {
			*rows = (*rows)[1:] // o1 rolled back; its order.created and order.paid are out
		}},
		{"order lost after shipping", audit.CheckEffectHasOrder, "shipped: 1 for orders not in the table", func(_ *[]audit.OrderRow, e *[]audit.Effect) {
			*e = append(*e, audit.Effect{Kind: audit.EffectShipped, OrderID: "o9", Ref: "9-0"})
		}},
		{"order lost after its charge", audit.CheckEffectHasOrder, "charge: 1 for orders not in the table", func(_ *[]audit.OrderRow, e *[]audit.Effect) {
			*e = append(*e, audit.Effect{Kind: audit.EffectCharge, OrderID: "o9", Ref: "o9:pay"})
		}},
		{"charged twice", audit.CheckOneChargePerOrder, "order o1 charged 2 times", func(_ *[]audit.OrderRow, e *[]audit.Effect) {
			*e = append(*e, audit.Effect{Kind: audit.EffectCharge, OrderID: "o1", Ref: "o1:pay-again"})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, effects := effectsRun()
			tc.mutate(&rows, &effects)
			r := audit.Effects(rows, effects)
			if !r.Caught(tc.check) || !strings.Contains(r.String(), tc.want) {
				t.Fatalf("%s: want %s with %q, got %v", tc.name, tc.check, tc.want, r)
			}
		})
	}
}
