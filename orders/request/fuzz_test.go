package request_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/orders/request"
)

// FuzzParse checks that Parse never panics, that every error is a typed
// *request.Error around a sentinel, that whatever it accepts is valid JSON and
// a valid order, and that the canonical form of an accepted order parses back
// to the same order and fingerprint.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"productId": "42", "quantity": 1, "addressVersion": "v1", "couponId": null}`,
		`{"productId":42,"quantity":1000,"addressVersion":"v1","couponId":"C"}`,
		`{"quantity":1,"productId":"a\"b","addressVersion":"v\u0031","trace":{"id":[1,2]}}`,
		`{"productId":"42","productId":"43","quantity":1,"addressVersion":"v1"}`,
		`{"productId":4.2,"quantity":1,"addressVersion":"v1"}`,
		`{"productId":"42","quantity":1e2,"addressVersion":"v1"}`,
		`{"productId":"42","quantity":-0,"addressVersion":"v1"}`,
		`{"productId":"42","quantity":1,"addressVersion":"v1"} trailing`,
		`{"ProductId":"42","quantity":1,"addressVersion":"v1"}`,
		"{\"productId\":\"4\xff\",\"quantity\":1,\"addressVersion\":\"v1\"}",
		`[]`, `null`, ``, `{`, `{}`, `{"a":}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		o, err := request.ParseBytes(data)
		if err != nil {
			var re *request.Error
			if !errors.As(err, &re) || re.Reason == "" {
				t.Fatalf("error %v (%T) is not a *request.Error with a reason", err, err)
			}
			known := false
			for _, s := range []error{request.ErrTooLarge, request.ErrMalformed, request.ErrMissingField,
				request.ErrInvalidField, request.ErrDuplicateField} {
				known = known || errors.Is(err, s)
			}
			if !known {
				t.Fatalf("error %v wraps no body sentinel", err)
			}
			if !reflect.DeepEqual(o, request.Order{}) {
				t.Fatalf("error with non-zero order %+v", o)
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		if err := o.Validate(); err != nil {
			t.Fatalf("accepted %q as invalid order %+v: %v", data, o, err)
		}
		canon := o.Canonical()
		if !json.Valid(canon) {
			t.Fatalf("canonical form %q is not valid JSON", canon)
		}
		again, err := request.ParseBytes(canon)
		if err != nil {
			t.Fatalf("canonical form %s rejected: %v", canon, err)
		}
		if !reflect.DeepEqual(again, o) || again.Fingerprint() != o.Fingerprint() {
			t.Fatalf("round trip changed the order: %+v -> %s -> %+v", o, canon, again)
		}
		if string(again.Canonical()) != string(canon) {
			t.Fatalf("canonical form is not a fixed point: %s vs %s", again.Canonical(), canon)
		}
		if len(o.Fingerprint()) != 64 {
			t.Fatalf("fingerprint %q is not 64 hex digits", o.Fingerprint())
		}
	})
}

// FuzzFingerprint builds a valid order, writes it as JSON with its fields in
// a permuted order, with varied whitespace and escapes, productId as a number
// when it can be, and unknown fields mixed in, and checks that the parsed
// order has the original fingerprint. It then changes each business field in
// turn and checks that the fingerprint changes.
func FuzzFingerprint(f *testing.F) {
	f.Add("42", 1, "v1", "", uint8(0), uint8(0), "trace-1", true)
	f.Add("42", 1, "v1", "", uint8(5), uint8(3), "", false)
	f.Add("sku-<9>&", 1000, "addr\"7\\", "SAVE10", uint8(23), uint8(7), `{"nested":[1,"x"]}`, false)
	f.Add("0", 17, "~", "c", uint8(11), uint8(200), "\u2028", true)
	f.Fuzz(func(t *testing.T, product string, qty int, addr, coupon string, perm, ws uint8, trace string, numeric bool) {
		o := request.Order{ProductID: product, Quantity: qty, AddressVersion: addr, CouponID: coupon}
		if o.Validate() != nil {
			return
		}
		want := o.Fingerprint()
		body := encodePermuted(o, perm, ws, trace, numeric)
		got, err := request.ParseBytes(body)
		if err != nil {
			t.Fatalf("ParseBytes(%s): %v", body, err)
		}
		if !reflect.DeepEqual(got, o) {
			t.Fatalf("ParseBytes(%s) = %+v, want %+v", body, got, o)
		}
		if got.Fingerprint() != want {
			t.Fatalf("fingerprint of %s = %s, want %s", body, got.Fingerprint(), want)
		}

		// Each business-field change must change the fingerprint.
		variants := []request.Order{o, o, o, o}
		variants[0].ProductID += "x"
		variants[1].Quantity = o.Quantity%request.MaxQuantity + 1
		variants[2].AddressVersion += "x"
		if o.CouponID == "" {
			variants[3].CouponID = "null"
		} else {
			variants[3].CouponID = ""
		}
		for _, v := range variants {
			if v.Fingerprint() == want {
				t.Fatalf("orders %+v and %+v share fingerprint %s", o, v, want)
			}
		}
	})
}

// encodePermuted writes o as a JSON object with its members in the order
// chosen by perm, separated by whitespace chosen by ws, with an unknown
// "traceId" member and, for some perm values, an explicit null coupon or a
// nested unknown object.
func encodePermuted(o request.Order, perm, ws uint8, trace string, numeric bool) []byte {
	quote := func(s string) string {
		b, _ := json.Marshal(s) // escapes <, >, & and U+2028: other spellings of the same strings
		return string(b)
	}
	product := quote(o.ProductID)
	if numeric && isCanonicalDecimal(o.ProductID) {
		product = o.ProductID
	}
	members := []string{
		`"productId":` + product,
		`"quantity":` + strconv.Itoa(o.Quantity),
		`"addressVersion":` + quote(o.AddressVersion),
		`"traceId":` + quote(trace),
	}
	switch {
	case o.CouponID != "":
		members = append(members, `"couponId":`+quote(o.CouponID))
	case perm&1 == 1:
		members = append(members, `"couponId":null`)
	}
	if perm&2 == 2 {
		members = append(members, `"meta":{"productId":"other","quantity":[9,9]}`)
	}
	// A Fisher-Yates shuffle driven by perm.
	seed := uint32(perm)*2654435761 + 1
	for i := len(members) - 1; i > 0; i-- {
		seed = seed*1103515245 + 12345
		j := int(seed>>16) % (i + 1)
		members[i], members[j] = members[j], members[i]
	}
	spaces := []string{"", " ", "\n", "\t", "\r\n  "}
	sp := func(k int) string { return spaces[(int(ws)+k)%len(spaces)] }
	var b strings.Builder
	b.WriteString(sp(0) + "{" + sp(1))
	for i, m := range members {
		if i > 0 {
			b.WriteString(sp(i) + "," + sp(i+2))
		}
		k, v, _ := strings.Cut(m, ":")
		b.WriteString(k + sp(i+3) + ":" + sp(i+4) + v)
	}
	b.WriteString(sp(2) + "}" + sp(3))
	return []byte(b.String())
}

func isCanonicalDecimal(s string) bool {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
