package request_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/orders/request"
)

func TestParseAccepts(t *testing.T) {
	cases := []struct {
		name string
		body string
		want request.Order
	}{
		{"string product, null coupon", `{"productId": "42", "quantity": 1, "addressVersion": "v1", "couponId": null}`,
			request.Order{ProductID: "42", Quantity: 1, AddressVersion: "v1"}},
		{"number product", `{"productId": 42, "quantity": 1, "addressVersion": "v1"}`,
			request.Order{ProductID: "42", Quantity: 1, AddressVersion: "v1"}},
		{"number zero product", `{"productId": 0, "quantity": 1, "addressVersion": "v1"}`,
			request.Order{ProductID: "0", Quantity: 1, AddressVersion: "v1"}},
		{"coupon", `{"productId":"sku-9","quantity":1000,"addressVersion":"addr@3","couponId":"SAVE10"}`,
			request.Order{ProductID: "sku-9", Quantity: 1000, AddressVersion: "addr@3", CouponID: "SAVE10"}},
		{"unknown fields ignored", `{"traceId":"abc","productId":"42","meta":{"a":[1,2,{"b":null}]},"quantity":2,"addressVersion":"v1","x":1.5e300}`,
			request.Order{ProductID: "42", Quantity: 2, AddressVersion: "v1"}},
		{"escaped name and value", `{"product\u0049d":"4\u0032","quantity":1,"addressVersion":"v\u0031"}`,
			request.Order{ProductID: "42", Quantity: 1, AddressVersion: "v1"}},
		{"whitespace everywhere", " \r\n\t{ \"quantity\" :\n3 , \"addressVersion\":\"v1\",\"productId\":\"7\" }\n\n",
			request.Order{ProductID: "7", Quantity: 3, AddressVersion: "v1"}},
		{"max length ids", `{"productId":"` + strings.Repeat("p", 64) + `","quantity":1,"addressVersion":"` + strings.Repeat("a", 64) + `","couponId":"` + strings.Repeat("c", 64) + `"}`,
			request.Order{ProductID: strings.Repeat("p", 64), Quantity: 1, AddressVersion: strings.Repeat("a", 64), CouponID: strings.Repeat("c", 64)}},
		{"64-digit number product", `{"productId":` + "1" + strings.Repeat("0", 63) + `,"quantity":1,"addressVersion":"v1"}`,
			request.Order{ProductID: "1" + strings.Repeat("0", 63), Quantity: 1, AddressVersion: "v1"}},
		{"punctuation in ids", `{"productId":"a\"b\\c","quantity":1,"addressVersion":"~!"}`,
			request.Order{ProductID: `a"b\c`, Quantity: 1, AddressVersion: "~!"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := request.Parse(strings.NewReader(tc.body))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Parse = %+v, want %+v", got, tc.want)
			}
			if err := got.Validate(); err != nil {
				t.Fatalf("Validate of a parsed order: %v", err)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	const ok = `"quantity":1,"addressVersion":"v1"`
	cases := []struct {
		name  string
		body  string
		err   error
		field string
	}{
		{"empty body", ``, request.ErrMalformed, ""},
		{"only whitespace", " \n ", request.ErrMalformed, ""},
		{"not json", `productId=42`, request.ErrMalformed, ""},
		{"array", `[{"productId":"42",` + ok + `}]`, request.ErrMalformed, ""},
		{"null", `null`, request.ErrMalformed, ""},
		{"string", `"42"`, request.ErrMalformed, ""},
		{"truncated", `{"productId":"42",`, request.ErrMalformed, ""},
		{"unterminated string", `{"productId":"42`, request.ErrMalformed, "productId"},
		{"trailing comma", `{"productId":"42",` + ok + `,}`, request.ErrMalformed, ""},
		{"trailing object", `{"productId":"42",` + ok + `}{}`, request.ErrMalformed, ""},
		{"trailing garbage", `{"productId":"42",` + ok + `} x`, request.ErrMalformed, ""},
		{"trailing brace", `{"productId":"42",` + ok + `}}`, request.ErrMalformed, ""},
		{"bad unknown value", `{"productId":"42",` + ok + `,"trace":tru}`, request.ErrMalformed, "trace"},
		{"single quotes", `{'productId':'42'}`, request.ErrMalformed, ""},
		{"byte order mark", "\ufeff{\"productId\":\"42\"," + ok + "}", request.ErrMalformed, ""},

		{"duplicate known", `{"productId":"42","productId":"43",` + ok + `}`, request.ErrDuplicateField, "productId"},
		{"duplicate via escape", `{"productId":"42","product\u0049d":"42",` + ok + `}`, request.ErrDuplicateField, "productId"},
		{"duplicate unknown", `{"productId":"42",` + ok + `,"t":1,"t":1}`, request.ErrDuplicateField, "t"},
		{"case variant", `{"productId":"42",` + ok + `,"CouponId":"X"}`, request.ErrInvalidField, "CouponId"},

		{"missing product", `{` + ok + `}`, request.ErrMissingField, "productId"},
		{"null product", `{"productId":null,` + ok + `}`, request.ErrMissingField, "productId"},
		{"empty product", `{"productId":"",` + ok + `}`, request.ErrInvalidField, "productId"},
		{"float product", `{"productId":4.2,` + ok + `}`, request.ErrInvalidField, "productId"},
		{"integral float product", `{"productId":42.0,` + ok + `}`, request.ErrInvalidField, "productId"},
		{"exponent product", `{"productId":4e1,` + ok + `}`, request.ErrInvalidField, "productId"},
		{"negative product", `{"productId":-42,` + ok + `}`, request.ErrInvalidField, "productId"},
		{"negative zero product", `{"productId":-0,` + ok + `}`, request.ErrInvalidField, "productId"},
		{"long number product", `{"productId":1` + strings.Repeat("0", 64) + `,` + ok + `}`, request.ErrInvalidField, "productId"},
		{"long string product", `{"productId":"` + strings.Repeat("p", 65) + `",` + ok + `}`, request.ErrInvalidField, "productId"},
		{"space in product", `{"productId":"4 2",` + ok + `}`, request.ErrInvalidField, "productId"},
		{"control char product", `{"productId":"4\u00002",` + ok + `}`, request.ErrInvalidField, "productId"},
		{"tab product", `{"productId":"4\t2",` + ok + `}`, request.ErrInvalidField, "productId"},
		{"non-ascii product", `{"productId":"42é",` + ok + `}`, request.ErrInvalidField, "productId"},
		{"invalid utf8 product", "{\"productId\":\"4\xff2\"," + ok + "}", request.ErrInvalidField, "productId"},
		{"bool product", `{"productId":true,` + ok + `}`, request.ErrInvalidField, "productId"},
		{"object product", `{"productId":{"id":42},` + ok + `}`, request.ErrInvalidField, "productId"},
		{"array product", `{"productId":[42],` + ok + `}`, request.ErrInvalidField, "productId"},

		{"missing quantity", `{"productId":"42","addressVersion":"v1"}`, request.ErrMissingField, "quantity"},
		{"null quantity", `{"productId":"42","quantity":null,"addressVersion":"v1"}`, request.ErrMissingField, "quantity"},
		{"zero quantity", `{"productId":"42","quantity":0,"addressVersion":"v1"}`, request.ErrInvalidField, "quantity"},
		{"negative quantity", `{"productId":"42","quantity":-1,"addressVersion":"v1"}`, request.ErrInvalidField, "quantity"},
		{"negative zero quantity", `{"productId":"42","quantity":-0,"addressVersion":"v1"}`, request.ErrInvalidField, "quantity"},
		{"quantity 1001", `{"productId":"42","quantity":1001,"addressVersion":"v1"}`, request.ErrInvalidField, "quantity"},
		{"huge quantity", `{"productId":"42","quantity":99999999999999999999999999,"addressVersion":"v1"}`, request.ErrInvalidField, "quantity"},
		{"float quantity", `{"productId":"42","quantity":1.5,"addressVersion":"v1"}`, request.ErrInvalidField, "quantity"},
		{"integral float quantity", `{"productId":"42","quantity":1.0,"addressVersion":"v1"}`, request.ErrInvalidField, "quantity"},
		{"exponent quantity", `{"productId":"42","quantity":1e2,"addressVersion":"v1"}`, request.ErrInvalidField, "quantity"},
		{"string quantity", `{"productId":"42","quantity":"1","addressVersion":"v1"}`, request.ErrInvalidField, "quantity"},
		{"bool quantity", `{"productId":"42","quantity":true,"addressVersion":"v1"}`, request.ErrInvalidField, "quantity"},

		{"missing address", `{"productId":"42","quantity":1}`, request.ErrMissingField, "addressVersion"},
		{"null address", `{"productId":"42","quantity":1,"addressVersion":null}`, request.ErrMissingField, "addressVersion"},
		{"empty address", `{"productId":"42","quantity":1,"addressVersion":""}`, request.ErrInvalidField, "addressVersion"},
		{"number address", `{"productId":"42","quantity":1,"addressVersion":1}`, request.ErrInvalidField, "addressVersion"},
		{"long address", `{"productId":"42","quantity":1,"addressVersion":"` + strings.Repeat("a", 65) + `"}`, request.ErrInvalidField, "addressVersion"},

		{"empty coupon", `{"productId":"42",` + ok + `,"couponId":""}`, request.ErrInvalidField, "couponId"},
		{"number coupon", `{"productId":"42",` + ok + `,"couponId":10}`, request.ErrInvalidField, "couponId"},
		{"false coupon", `{"productId":"42",` + ok + `,"couponId":false}`, request.ErrInvalidField, "couponId"},
		{"long coupon", `{"productId":"42",` + ok + `,"couponId":"` + strings.Repeat("c", 65) + `"}`, request.ErrInvalidField, "couponId"},
		{"newline coupon", `{"productId":"42",` + ok + `,"couponId":"a\nb"}`, request.ErrInvalidField, "couponId"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o, err := request.Parse(strings.NewReader(tc.body))
			if err == nil {
				t.Fatalf("Parse accepted %q as %+v", tc.body, o)
			}
			if !errors.Is(err, tc.err) {
				t.Fatalf("Parse error = %v, want %v", err, tc.err)
			}
			var re *request.Error
			if !errors.As(err, &re) {
				t.Fatalf("error %T is not *request.Error", err)
			}
			if re.Field != tc.field {
				t.Fatalf("field = %q, want %q (%v)", re.Field, tc.field, err)
			}
			if re.Reason == "" {
				t.Fatalf("empty reason in %v", err)
			}
			if !reflect.DeepEqual(o, request.Order{}) {
				t.Fatalf("rejected parse returned a non-zero order %+v", o)
			}
		})
	}
}

func TestParseBodyLimit(t *testing.T) {
	valid := `{"productId":"42","quantity":1,"addressVersion":"v1","pad":"`
	// Exactly at the limit: accepted.
	body := valid + strings.Repeat("x", request.MaxBodyBytes-len(valid)-2) + `"}`
	if len(body) != request.MaxBodyBytes {
		t.Fatalf("test body is %d bytes", len(body))
	}
	if _, err := request.Parse(strings.NewReader(body)); err != nil {
		t.Fatalf("body of exactly MaxBodyBytes rejected: %v", err)
	}
	// One byte more: ErrTooLarge, before any JSON is looked at.
	if _, err := request.Parse(strings.NewReader(body + " ")); !errors.Is(err, request.ErrTooLarge) {
		t.Fatalf("body of MaxBodyBytes+1: err = %v, want ErrTooLarge", err)
	}
	if _, err := request.ParseBytes([]byte(body + " ")); !errors.Is(err, request.ErrTooLarge) {
		t.Fatalf("ParseBytes of MaxBodyBytes+1: err = %v, want ErrTooLarge", err)
	}
	// The reader is not drained past the limit.
	r := &countingReader{r: strings.NewReader(body + strings.Repeat(" ", 1<<20))}
	if _, err := request.Parse(r); !errors.Is(err, request.ErrTooLarge) {
		t.Fatalf("huge body: err = %v, want ErrTooLarge", err)
	}
	if r.n > request.MaxBodyBytes+1 {
		t.Fatalf("Parse read %d bytes, want at most %d", r.n, request.MaxBodyBytes+1)
	}
}

func TestParseWithMaxBytes(t *testing.T) {
	body := `{"productId":"42","quantity":1,"addressVersion":"v1"}`
	if _, err := request.Parse(strings.NewReader(body), request.WithMaxBytes(int64(len(body)-1))); !errors.Is(err, request.ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
	if _, err := request.Parse(strings.NewReader(body), request.WithMaxBytes(int64(len(body)))); err != nil {
		t.Fatalf("body at custom limit rejected: %v", err)
	}
	if _, err := request.Parse(strings.NewReader(body), request.WithMaxBytes(0)); err != nil {
		t.Fatalf("WithMaxBytes(0) should keep the default: %v", err)
	}
}

func TestParseRefusesNilOption(t *testing.T) {
	body := `{"productId":"42","quantity":1,"addressVersion":"v1"}`
	r := &countingReader{r: strings.NewReader(body)}
	_, err := request.Parse(r, request.WithMaxBytes(100), nil)
	if !errors.Is(err, request.ErrConfig) || !strings.Contains(err.Error(), "option 1 is nil") {
		t.Fatalf("Parse: err = %v, want ErrConfig naming option 1", err)
	}
	if r.n != 0 {
		t.Fatalf("Parse read %d bytes with a nil option, want none", r.n)
	}
	if _, err := request.ParseBytes([]byte(body), nil); !errors.Is(err, request.ErrConfig) || !strings.Contains(err.Error(), "option 0 is nil") {
		t.Fatalf("ParseBytes: err = %v, want ErrConfig naming option 0", err)
	}
}

func TestParseMaxBytesReader(t *testing.T) {
	body := `{"productId":"42","quantity":1,"addressVersion":"v1"}`
	req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
	rec := httptest.NewRecorder()
	_, err := request.Parse(http.MaxBytesReader(rec, req.Body, 10))
	if !errors.Is(err, request.ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge from *http.MaxBytesError", err)
	}
}

func TestParseReadError(t *testing.T) {
	boom := errors.New("connection reset")
	_, err := request.Parse(io.MultiReader(strings.NewReader(`{"productId":`), errReader{boom}))
	if !errors.Is(err, request.ErrRead) || !errors.Is(err, boom) {
		t.Fatalf("err = %v, want ErrRead wrapping the reader's error", err)
	}
}

func TestErrorMessage(t *testing.T) {
	_, err := request.ParseBytes([]byte(`{"productId":"42","quantity":0,"addressVersion":"v1"}`))
	want := `request: invalid field "quantity": must be an integer from 1 to 1000`
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v, want %q", err, want)
	}
	_, err = request.ParseBytes(nil)
	if err == nil || err.Error() != "request: malformed request body: the body is empty" {
		t.Fatalf("error = %v", err)
	}
}

func TestValidate(t *testing.T) {
	good := request.Order{ProductID: "42", Quantity: 1, AddressVersion: "v1"}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid order: %v", err)
	}
	for _, tc := range []struct {
		o     request.Order
		err   error
		field string
	}{
		{request.Order{Quantity: 1, AddressVersion: "v1"}, request.ErrMissingField, "productId"},
		{request.Order{ProductID: "4 2", Quantity: 1, AddressVersion: "v1"}, request.ErrInvalidField, "productId"},
		{request.Order{ProductID: "42", AddressVersion: "v1"}, request.ErrInvalidField, "quantity"},
		{request.Order{ProductID: "42", Quantity: 1001, AddressVersion: "v1"}, request.ErrInvalidField, "quantity"},
		{request.Order{ProductID: "42", Quantity: 1}, request.ErrMissingField, "addressVersion"},
		{request.Order{ProductID: "42", Quantity: 1, AddressVersion: "v1", CouponID: "\x00"}, request.ErrInvalidField, "couponId"},
	} {
		err := tc.o.Validate()
		var re *request.Error
		if !errors.Is(err, tc.err) || !errors.As(err, &re) || re.Field != tc.field {
			t.Errorf("Validate(%+v) = %v, want %v on %s", tc.o, err, tc.err, tc.field)
		}
	}
}

func TestCanonical(t *testing.T) {
	for _, tc := range []struct {
		o    request.Order
		want string
	}{
		{request.Order{ProductID: "42", Quantity: 1, AddressVersion: "v1"},
			`{"productId":"42","quantity":1,"addressVersion":"v1","couponId":null}`},
		{request.Order{ProductID: "42", Quantity: 10, AddressVersion: "v1", CouponID: "C"},
			`{"productId":"42","quantity":10,"addressVersion":"v1","couponId":"C"}`},
		{request.Order{ProductID: `a"b\c`, Quantity: 1, AddressVersion: "<&>"},
			`{"productId":"a\"b\\c","quantity":1,"addressVersion":"<&>","couponId":null}`},
		// Invalid orders still encode unambiguously.
		{request.Order{ProductID: "\x00\n\x1f", Quantity: -1, AddressVersion: ""},
			`{"productId":"\u0000\u000a\u001f","quantity":-1,"addressVersion":"","couponId":null}`},
	} {
		if got := string(tc.o.Canonical()); got != tc.want {
			t.Errorf("Canonical(%+v)\n got %s\nwant %s", tc.o, got, tc.want)
		}
	}
}

func TestFingerprint(t *testing.T) {
	// Pinned value: the fingerprint is part of the API contract. It is the
	// SHA-256 of the canonical JSON, as `printf %s '<json>' | sha256sum` shows.
	o := request.Order{ProductID: "42", Quantity: 1, AddressVersion: "v1"}
	const want = "d97da156f58deb034159672be502751e13beb9c99d340a2fc1212d7348223514"
	if got := o.Fingerprint(); got != want {
		t.Fatalf("Fingerprint = %s, want %s", got, want)
	}

	same := []string{
		`{"productId": "42", "quantity": 1, "addressVersion": "v1", "couponId": null}`,
		`{"productId":42,"quantity":1,"addressVersion":"v1"}`,
		`{"couponId":null,"addressVersion":"v1","quantity":1,"productId":42}`,
		"{\n  \"quantity\": 1,\n  \"productId\": \"42\",\n  \"addressVersion\": \"v\\u0031\",\n  \"traceId\": \"t-123\"\n}",
		`{"x-request-id":"r1","productId":"42","quantity":1,"addressVersion":"v1","client":{"ts":1700000000}}`,
	}
	for _, body := range same {
		got, err := request.ParseBytes([]byte(body))
		if err != nil {
			t.Fatalf("ParseBytes(%s): %v", body, err)
		}
		if got.Fingerprint() != want {
			t.Errorf("fingerprint of %s = %s, want %s", body, got.Fingerprint(), want)
		}
	}

	different := []request.Order{
		{ProductID: "43", Quantity: 1, AddressVersion: "v1"},
		{ProductID: "042", Quantity: 1, AddressVersion: "v1"},
		{ProductID: "42", Quantity: 2, AddressVersion: "v1"},
		{ProductID: "42", Quantity: 1, AddressVersion: "v2"},
		{ProductID: "42", Quantity: 1, AddressVersion: "V1"},
		{ProductID: "42", Quantity: 1, AddressVersion: "v1", CouponID: "C1"},
		{ProductID: "42", Quantity: 1, AddressVersion: "v1", CouponID: "null"},
	}
	seen := map[string]request.Order{want: o}
	for _, d := range different {
		fp := d.Fingerprint()
		if prev, dup := seen[fp]; dup {
			t.Errorf("orders %+v and %+v share fingerprint %s", prev, d, fp)
		}
		seen[fp] = d
	}
}

func TestIdempotencyKey(t *testing.T) {
	ok := []string{"a", "req-001", "8e03978e-40d5-43e8-bc93-6894a57f9324", `"quoted"`, "a:b/c=d~!", strings.Repeat("k", 255)}
	for _, k := range ok {
		h := http.Header{}
		h.Set(request.IdempotencyKeyHeader, k)
		got, err := request.IdempotencyKey(h)
		if err != nil || got.String() != k || got.IsZero() {
			t.Errorf("IdempotencyKey(%q) = %q, %v", k, got, err)
		}
	}
	for _, tc := range []struct {
		name string
		vals []string
		err  error
	}{
		{"absent", nil, request.ErrMissingIdempotencyKey},
		{"empty", []string{""}, request.ErrMissingIdempotencyKey},
		{"repeated", []string{"a", "b"}, request.ErrInvalidIdempotencyKey},
		{"repeated empty", []string{"", ""}, request.ErrInvalidIdempotencyKey},
		{"too long", []string{strings.Repeat("k", 256)}, request.ErrInvalidIdempotencyKey},
		{"space", []string{"req 001"}, request.ErrInvalidIdempotencyKey},
		{"leading space", []string{" req"}, request.ErrInvalidIdempotencyKey},
		{"tab", []string{"req\t1"}, request.ErrInvalidIdempotencyKey},
		{"newline", []string{"req\n1"}, request.ErrInvalidIdempotencyKey},
		{"del", []string{"req\x7f"}, request.ErrInvalidIdempotencyKey},
		{"non-ascii", []string{"clé"}, request.ErrInvalidIdempotencyKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range tc.vals {
				h.Add(request.IdempotencyKeyHeader, v)
			}
			got, err := request.IdempotencyKey(h)
			if !errors.Is(err, tc.err) || !got.IsZero() {
				t.Fatalf("IdempotencyKey(%q) = %q, %v; want %v", tc.vals, got, err, tc.err)
			}
			var re *request.Error
			if !errors.As(err, &re) || re.Field != request.IdempotencyKeyHeader {
				t.Fatalf("error %v does not name the header", err)
			}
		})
	}
	// Header names are case-insensitive on the wire; the canonical form is looked up.
	req := httptest.NewRequest(http.MethodPost, "/orders", nil)
	req.Header["Idempotency-Key"] = []string{"k1"}
	if got, err := request.IdempotencyKey(req.Header); err != nil || got.String() != "k1" {
		t.Fatalf("IdempotencyKey = %q, %v", got, err)
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func TestParseKey(t *testing.T) {
	k, err := request.ParseKey("req-001")
	if err != nil || k.String() != "req-001" || k.IsZero() {
		t.Fatalf("ParseKey = %q, %v", k, err)
	}
	if k, err := request.ParseKey(strings.Repeat("k", request.MaxIdempotencyKeyLen+1)); !errors.Is(err, request.ErrInvalidIdempotencyKey) || !k.IsZero() {
		t.Fatalf("long key = %q, %v", k, err)
	}
	if k, err := request.ParseKey(""); !errors.Is(err, request.ErrMissingIdempotencyKey) || !k.IsZero() {
		t.Fatalf("empty key = %q, %v", k, err)
	}
	if !(request.Key{}).IsZero() {
		t.Fatal("the zero Key is a key")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("MustKey accepted a key with a space")
		}
	}()
	request.MustKey("a b")
}

// FuzzParseKey checks the key rule on any string: a key is accepted
// exactly when it has 1..MaxIdempotencyKeyLen bytes of visible ASCII, and
// an accepted key is kept byte for byte.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"", "a", "req 1", "clé", strings.Repeat("k", 255), strings.Repeat("k", 256), "\x7f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := request.ParseKey(s)
		want := len(s) >= 1 && len(s) <= request.MaxIdempotencyKeyLen
		for i := 0; i < len(s); i++ {
			if s[i] < 0x21 || s[i] > 0x7e {
				want = false
			}
		}
		if want != (err == nil) {
			t.Fatalf("ParseKey(%q) = %v, want accepted=%v", s, err, want)
		}
		if err == nil && k.String() != s {
			t.Fatalf("ParseKey(%q) kept %q", s, k.String())
		}
		if err != nil && !k.IsZero() {
			t.Fatalf("ParseKey(%q) failed but returned a key", s)
		}
	})
}
