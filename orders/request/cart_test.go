package request_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/orders/request"
)

func TestParseCart(t *testing.T) {
	const addr = `,"addressVersion":"v1"`
	two := []request.Line{{ProductID: "42", Quantity: 1}, {ProductID: "7", Quantity: 2}}
	for _, tc := range []struct {
		name, body string
		want       request.Order
	}{
		{"sorted", `{"items":[{"productId":"42","quantity":1},{"productId":"7","quantity":2}]` + addr + `}`,
			request.Order{Items: two, AddressVersion: "v1"}},
		{"any order, numbers, unknown fields", `{"items":[{"quantity":2,"productId":7,"note":"x"},{"productId":"42","quantity":1}]` + addr + `,"traceId":1}`,
			request.Order{Items: two, AddressVersion: "v1"}},
		{"a repeated line merged", `{"items":[{"productId":"7","quantity":2},{"productId":"42","quantity":1},{"productId":"7","quantity":2}]` + addr + `}`,
			request.Order{Items: two, AddressVersion: "v1"}},
		{"one line is a single-product order", `{"items":[{"productId":"42","quantity":3}]` + addr + `}`,
			request.Order{ProductID: "42", Quantity: 3, AddressVersion: "v1"}},
		{"null items is no cart", `{"items":null,"productId":"42","quantity":3` + addr + `}`,
			request.Order{ProductID: "42", Quantity: 3, AddressVersion: "v1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := request.ParseBytes([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			if err := got.Validate(); err != nil {
				t.Fatalf("Parse returned an order Validate refuses: %v", err)
			}
		})
	}
}

func TestParseCartBadInput(t *testing.T) {
	const addr = `,"addressVersion":"v1"`
	line := func(p string, q int) string { return fmt.Sprintf(`{"productId":%q,"quantity":%d}`, p, q) }
	var many []string
	for i := range request.MaxItems + 1 {
		many = append(many, line(fmt.Sprint(i), 1))
	}
	for _, tc := range []struct {
		name, body string
		err        error
		field      string
	}{
		{"empty cart", `{"items":[]` + addr + `}`, request.ErrInvalidField, "items"},
		{"too many lines", `{"items":[` + strings.Join(many, ",") + `]` + addr + `}`, request.ErrInvalidField, "items"},
		{"not an array", `{"items":{"productId":"1","quantity":1}` + addr + `}`, request.ErrInvalidField, "items"},
		{"a line not an object", `{"items":[` + line("1", 1) + `,3]` + addr + `}`, request.ErrInvalidField, "items[1]"},
		{"zero quantity", `{"items":[` + line("1", 1) + `,` + line("2", 0) + `]` + addr + `}`, request.ErrInvalidField, "items[1].quantity"},
		{"fraction", `{"items":[{"productId":"1","quantity":1.5},` + line("2", 1) + `]` + addr + `}`, request.ErrInvalidField, "items[0].quantity"},
		{"missing product", `{"items":[{"quantity":1},` + line("2", 1) + `]` + addr + `}`, request.ErrMissingField, "items[0].productId"},
		{"conflicting lines", `{"items":[` + line("1", 1) + `,` + line("2", 1) + `,` + line("1", 2) + `]` + addr + `}`, request.ErrInvalidField, "items[2].quantity"},
		{"conflicting forms", `{"items":[{"productId":1,"quantity":1},{"productId":"1","quantity":3}]` + addr + `}`, request.ErrInvalidField, "items[1].quantity"},
		{"duplicate name in a line", `{"items":[{"productId":"1","productId":"2","quantity":1}]` + addr + `}`, request.ErrDuplicateField, "items[0].productId"},
		{"case variant in a line", `{"items":[{"ProductId":"1","quantity":1}]` + addr + `}`, request.ErrInvalidField, "items[0].ProductId"},
		{"both forms", `{"productId":"1","quantity":1,"items":[` + line("2", 1) + `]` + addr + `}`, request.ErrInvalidField, "items"},
		{"both forms, quantity only", `{"quantity":1,"items":[` + line("2", 1) + `]` + addr + `}`, request.ErrInvalidField, "items"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := request.ParseBytes([]byte(tc.body))
			var re *request.Error
			if !errors.Is(err, tc.err) || !errors.As(err, &re) || re.Field != tc.field || re.Reason == "" {
				t.Fatalf("got %v (field %q), want %v on %q", err, fieldOf(err), tc.err, tc.field)
			}
			if !reflect.DeepEqual(o, request.Order{}) {
				t.Fatalf("a refused body returned %+v", o)
			}
		})
	}
}

func fieldOf(err error) string {
	var re *request.Error
	if errors.As(err, &re) {
		return re.Field
	}
	return ""
}

func TestValidateCart(t *testing.T) {
	two := []request.Line{{ProductID: "1", Quantity: 1}, {ProductID: "2", Quantity: 1}}
	for _, o := range []request.Order{
		{Items: two[:1], AddressVersion: "v1"},
		{Items: []request.Line{two[1], two[0]}, AddressVersion: "v1"},
		{Items: []request.Line{two[0], two[0]}, AddressVersion: "v1"},
		{Items: two, ProductID: "1", AddressVersion: "v1"},
		{Items: []request.Line{two[0], {ProductID: "2", Quantity: 0}}, AddressVersion: "v1"},
		{Items: two},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("Validate accepted %+v", o)
		}
	}
}

// FuzzCartFingerprint: a cart's fingerprint ignores the lines' order and a
// repeated line, and changes with any line.
func FuzzCartFingerprint(f *testing.F) {
	f.Add("1", 1, "2", 3, "3", 2, uint8(0))
	f.Add("a", 1000, "b", 1, "c", 7, uint8(5))
	f.Fuzz(func(t *testing.T, p1 string, q1 int, p2 string, q2 int, p3 string, q3 int, perm uint8) {
		lines := []request.Line{{ProductID: p1, Quantity: q1}, {ProductID: p2, Quantity: q2}, {ProductID: p3, Quantity: q3}}
		o, err := request.ParseBytes(cartBody(lines))
		if err != nil {
			return
		}
		rot := int(perm) % len(lines)
		shuffled := append(append(append([]request.Line(nil), lines[rot:]...), lines[:rot]...), lines[perm%2])
		o2, err := request.ParseBytes(cartBody(shuffled))
		if err != nil {
			t.Fatalf("a permutation with a repeated line was refused: %v", err)
		}
		if o.Fingerprint() != o2.Fingerprint() || !reflect.DeepEqual(o, o2) {
			t.Fatalf("%s and %s differ", o.Canonical(), o2.Canonical())
		}
		if err := o.Validate(); err != nil {
			t.Fatalf("Parse returned an order Validate refuses: %v", err)
		}
		again, err := request.ParseBytes(o.Canonical())
		if err != nil || !reflect.DeepEqual(again, o) {
			t.Fatalf("the canonical form %s does not parse back: %v", o.Canonical(), err)
		}
		changed := append([]request.Line(nil), lines...)
		changed[0].Quantity = changed[0].Quantity%request.MaxQuantity + 1
		if o3, err := request.ParseBytes(cartBody(changed)); err == nil && o3.Fingerprint() == o.Fingerprint() {
			t.Fatalf("%s and %s share a fingerprint", o.Canonical(), o3.Canonical())
		}
	})
}

func cartBody(lines []request.Line) []byte {
	parts := make([]string, len(lines))
	for i, l := range lines {
		parts[i] = fmt.Sprintf(`{"quantity":%d,"productId":%q}`, l.Quantity, l.ProductID)
	}
	return []byte(`{"addressVersion":"v1","items":[` + strings.Join(parts, ",") + `]}`)
}
