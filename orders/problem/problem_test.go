package problem_test

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/orders/problem"
)

// decode parses a body into a generic map, failing the test on bad JSON.
func decode(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", body, err)
	}
	return m
}

func TestConstructorsShape(t *testing.T) {
	cases := []struct {
		name   string
		p      problem.Problem
		status int
		code   string
		typ    string
		ext    map[string]any // extension members besides code
		header map[string]string
	}{
		{"invalid request with field", problem.InvalidRequest("quantity", "must be 1..1000"), 400,
			problem.CodeInvalidRequest, problem.TypeInvalidRequest, map[string]any{"field": "quantity"}, nil},
		{"invalid request without field", problem.InvalidRequest("", "malformed JSON"), 400,
			problem.CodeInvalidRequest, problem.TypeInvalidRequest, nil, nil},
		{"invalid idempotency key", problem.InvalidIdempotencyKey("missing"), 400,
			problem.CodeInvalidIdempotencyKey, problem.TypeInvalidIdempotencyKey, nil, nil},
		{"unauthorized", problem.Unauthorized("token expired"), 401,
			problem.CodeUnauthorized, problem.TypeUnauthorized, nil, map[string]string{"WWW-Authenticate": `Bearer realm="orders"`}},
		{"not found", problem.NotFound("no such order"), 404,
			problem.CodeNotFound, problem.TypeNotFound, nil, nil},
		{"fingerprint mismatch", problem.FingerprintMismatch(), 409,
			problem.CodeFingerprintMismatch, problem.TypeFingerprintMismatch, nil, nil},
		{"out of stock", problem.OutOfStock("42", 3), 409,
			problem.CodeOutOfStock, problem.TypeOutOfStock, map[string]any{"productId": "42", "quantity": float64(3)}, nil},
		{"payload too large", problem.PayloadTooLarge(65536), 413,
			problem.CodePayloadTooLarge, problem.TypePayloadTooLarge, map[string]any{"maxBytes": float64(65536)}, nil},
		{"unknown product", problem.UnknownProduct("999"), 422,
			problem.CodeUnknownProduct, problem.TypeUnknownProduct, map[string]any{"productId": "999"}, nil},
		{"internal", problem.Internal("oops"), 500,
			problem.CodeInternal, problem.TypeInternal, nil, nil},
		{"service unavailable", problem.ServiceUnavailable("lock quorum lost", 1500*time.Millisecond), 503,
			problem.CodeServiceUnavailable, problem.TypeServiceUnavailable, nil, map[string]string{"Retry-After": "2"}},
		{"outcome unknown", problem.OutcomeUnknown(3 * time.Second), 503,
			problem.CodeOutcomeUnknown, problem.TypeOutcomeUnknown, nil, map[string]string{"Retry-After": "3"}},
		{"key reused (IETF)", problem.KeyReused(), 422,
			problem.CodeFingerprintMismatch, problem.TypeFingerprintMismatch, nil, nil},
		{"request in progress (IETF)", problem.RequestInProgress(2500 * time.Millisecond), 409,
			problem.CodeRequestInProgress, problem.TypeRequestInProgress, nil, map[string]string{"Retry-After": "3"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			if err := problem.Write(rec, tc.p); err != nil {
				t.Fatalf("Write: %v", err)
			}
			if rec.Code != tc.status {
				t.Errorf("status = %d, want %d", rec.Code, tc.status)
			}
			if got := rec.Header().Get("Content-Type"); got != problem.ContentType {
				t.Errorf("Content-Type = %q, want %q", got, problem.ContentType)
			}
			for k, v := range tc.header {
				if got := rec.Header().Get(k); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
			m := decode(t, rec.Body.Bytes())
			if m["type"] != tc.typ {
				t.Errorf("type = %v, want %q", m["type"], tc.typ)
			}
			if m["status"] != float64(tc.status) {
				t.Errorf("status member = %v, want %d", m["status"], tc.status)
			}
			if m["code"] != tc.code {
				t.Errorf("code = %v, want %q", m["code"], tc.code)
			}
			if s, _ := m["title"].(string); s == "" {
				t.Errorf("title missing in %s", rec.Body)
			}
			if s, _ := m["detail"].(string); s == "" {
				t.Errorf("detail missing in %s", rec.Body)
			}
			want := 5 + len(tc.ext) // type title status detail code + extensions
			if len(m) != want {
				t.Errorf("body has %d members, want %d: %s", len(m), want, rec.Body)
			}
			for k, v := range tc.ext {
				if m[k] != v {
					t.Errorf("member %s = %#v, want %#v", k, m[k], v)
				}
			}
			if !strings.HasPrefix(tc.typ, problem.TypePrefix) {
				t.Errorf("type %q lacks prefix", tc.typ)
			}
		})
	}
}

func TestMarshalOrderAndDeterminism(t *testing.T) {
	p := problem.New(409, "invalid_state", "Invalid state", "order is CANCELLED").
		WithInstance("/orders/o1").
		With("zeta", 1).
		With("alpha", "a")
	got, err := problem.Encode(p)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"tag:quorumlock.github.io,2026:problems/invalid-state","title":"Invalid state","status":409,` +
		`"detail":"order is CANCELLED","instance":"/orders/o1","code":"invalid_state","alpha":"a","zeta":1}`
	if string(got) != want {
		t.Fatalf("encoding\n got %s\nwant %s", got, want)
	}
	for range 20 {
		again, _ := problem.Encode(p)
		if string(again) != string(got) {
			t.Fatalf("encoding is not deterministic: %s vs %s", again, got)
		}
	}
}

func TestZeroValue(t *testing.T) {
	body, err := problem.Encode(problem.Problem{})
	if err != nil || string(body) != "{}" {
		t.Fatalf("zero problem encodes as %q, %v; want {}", body, err)
	}
	rec := httptest.NewRecorder()
	if err := problem.Write(rec, problem.Problem{Status: 200}); err != nil {
		t.Fatal(err)
	}
	if rec.Code != 500 {
		t.Fatalf("status 200 problem written as %d, want 500", rec.Code)
	}
}

func TestReservedExtensionsCannotOverrideStandardMembers(t *testing.T) {
	p := problem.NotFound("no such order").
		With("status", 200).
		With("type", "about:blank").
		With("code", "ok").
		With("title", "x").
		With("detail", "y").
		With("instance", "z")
	m := decode(t, mustEncode(t, p))
	if m["status"] != float64(404) || m["type"] != problem.TypeNotFound || m["code"] != problem.CodeNotFound ||
		m["title"] != "Not found" || m["detail"] != "no such order" {
		t.Fatalf("extensions overrode standard members: %v", m)
	}
	if _, ok := m["instance"]; ok {
		t.Fatalf("reserved extension 'instance' leaked into body: %v", m)
	}
}

func TestWithDoesNotAliasOriginal(t *testing.T) {
	a := problem.OutOfStock("42", 1)
	b := a.With("extra", true)
	if _, ok := a.Extensions["extra"]; ok {
		t.Fatal("With modified the original problem's extensions")
	}
	if b.Extensions["extra"] != true {
		t.Fatal("With did not set the member on the copy")
	}
}

func TestWriteUnencodableExtension(t *testing.T) {
	rec := httptest.NewRecorder()
	err := problem.Write(rec, problem.InvalidRequest("", "x").With("bad", math.Inf(1)))
	if err == nil {
		t.Fatal("Write of an unencodable extension returned nil error")
	}
	if rec.Code != 500 {
		t.Fatalf("fallback status = %d, want 500", rec.Code)
	}
	if m := decode(t, rec.Body.Bytes()); m["code"] != problem.CodeInternal {
		t.Fatalf("fallback body = %v, want internal_error", m)
	}
}

type failingWriter struct{ *httptest.ResponseRecorder }

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("connection reset") }

func TestWriteReportsBodyError(t *testing.T) {
	err := problem.Write(failingWriter{httptest.NewRecorder()}, problem.NotFound("x"))
	if err == nil || !strings.Contains(err.Error(), "connection reset") {
		t.Fatalf("Write error = %v, want the writer's error", err)
	}
}

func TestHeaderIsCopied(t *testing.T) {
	p := problem.ServiceUnavailable("down", time.Second)
	rec := httptest.NewRecorder()
	if err := problem.Write(rec, p); err != nil {
		t.Fatal(err)
	}
	rec.Header().Set("Retry-After", "99")
	if p.Header.Get("Retry-After") != "1" {
		t.Fatal("Write shares header slices with the problem")
	}
}

func TestRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "1"},
		{0, "1"},
		{time.Nanosecond, "1"},
		{time.Second, "1"},
		{time.Second + time.Millisecond, "2"},
		{90 * time.Second, "90"},
		{time.Duration(math.MaxInt64), "9223372037"},
	} {
		if got := problem.RetryAfter(tc.d); got != tc.want {
			t.Errorf("RetryAfter(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

func TestProblemAsError(t *testing.T) {
	var err error = problem.OutOfStock("42", 2)
	var p problem.Problem
	if !errors.As(err, &p) || p.Status != http.StatusConflict {
		t.Fatalf("errors.As did not recover the problem from %v", err)
	}
	if !strings.Contains(err.Error(), "409 out_of_stock") {
		t.Fatalf("Error() = %q", err.Error())
	}
}

func mustEncode(t *testing.T, p problem.Problem) []byte {
	t.Helper()
	b, err := problem.Encode(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
