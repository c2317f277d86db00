// Package problem builds and writes RFC 9457 problem details
// (application/problem+json) for the orders API.
//
// A Problem carries the standard members (type, title, status, detail,
// instance), a machine-readable "code" extension member that every problem of
// this API has, and optional further extension members. Constructors exist for
// each error case of the API; New builds any other.
//
// # Problem types
//
// Every type is a tag URI (RFC 4151) of the form
//
//	tag:quorumlock.github.io,2026:problems/<name>
//
// Type URIs are identifiers, not links: clients compare them as strings and
// need not dereference them. The "code" member carries the same information
// in a shorter form (for example "out_of_stock" for the type ending in
// "problems/out-of-stock").
//
// # Status codes
//
//   - 400 invalid_request: malformed JSON, a missing or invalid field.
//   - 400 invalid_idempotency_key: the Idempotency-Key header is missing or invalid.
//   - 401 unauthorized: the bearer token is missing, malformed, forged or expired.
//   - 404 not_found: the addressed resource (an order) does not exist.
//   - 409 fingerprint_mismatch: the Idempotency-Key was already used with a
//     different request.
//   - 409 out_of_stock: not enough stock. The orders service saves and replays
//     this answer like a success.
//   - 413 payload_too_large: the body is larger than the limit.
//   - 422 unknown_product: the body names a product that does not exist. The
//     request target (/orders) exists and the body is well formed; it refers to
//     something unknown, which is an unprocessable request rather than a missing
//     resource, so the answer is 422 and not 404.
//   - 500 internal_error: a bug or an unexpected failure.
//   - 503 service_unavailable and 503 outcome_unknown: a dependency is down, or
//     the outcome of an earlier attempt cannot be told yet. Both carry
//     Retry-After.
//
// "Still in progress" is not a problem: the orders service answers 202 with a
// normal body.
package problem

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ContentType is the media type of a problem details body.
const ContentType = "application/problem+json"

// TypePrefix starts every problem type URI of this API.
const TypePrefix = "tag:quorumlock.github.io,2026:problems/"

// Codes: the value of the "code" extension member of each problem.
const (
	CodeInvalidRequest        = "invalid_request"
	CodeInvalidIdempotencyKey = "invalid_idempotency_key"
	CodeUnauthorized          = "unauthorized"
	CodeNotFound              = "not_found"
	CodeFingerprintMismatch   = "fingerprint_mismatch"
	CodeOutOfStock            = "out_of_stock"
	CodePayloadTooLarge       = "payload_too_large"
	CodeUnknownProduct        = "unknown_product"
	CodeInternal              = "internal_error"
	CodeServiceUnavailable    = "service_unavailable"
	CodeOutcomeUnknown        = "outcome_unknown"
	CodeRequestInProgress     = "request_in_progress"
)

// Type URIs of the problems above.
const (
	TypeInvalidRequest        = TypePrefix + "invalid-request"
	TypeInvalidIdempotencyKey = TypePrefix + "invalid-idempotency-key"
	TypeUnauthorized          = TypePrefix + "unauthorized"
	TypeNotFound              = TypePrefix + "not-found"
	TypeFingerprintMismatch   = TypePrefix + "fingerprint-mismatch"
	TypeOutOfStock            = TypePrefix + "out-of-stock"
	TypePayloadTooLarge       = TypePrefix + "payload-too-large"
	TypeUnknownProduct        = TypePrefix + "unknown-product"
	TypeInternal              = TypePrefix + "internal-error"
	TypeServiceUnavailable    = TypePrefix + "service-unavailable"
	TypeOutcomeUnknown        = TypePrefix + "outcome-unknown"
	TypeRequestInProgress     = TypePrefix + "request-in-progress"
)

// reserved reports whether name is a member that extensions may not use.
func reserved(name string) bool {
	switch name {
	case "type", "title", "status", "detail", "instance", "code":
		return true
	}
	return false
}

// Problem is one RFC 9457 problem details object.
//
// The zero value is valid: it encodes as {} and is written with status 500.
type Problem struct {
	// Type is a URI reference that identifies the problem type. Empty means
	// "about:blank" and is omitted from the body.
	Type string
	// Title is a short, human-readable summary of the problem type. It does
	// not change from occurrence to occurrence.
	Title string
	// Status is the HTTP status code. Write sends it; a value outside
	// 400..599 is sent as 500.
	Status int
	// Detail explains this occurrence to a human. Clients should not parse it.
	Detail string
	// Instance is a URI reference that identifies this occurrence, for
	// example the path of the request or of the order concerned.
	Instance string
	// Code is the machine-readable "code" extension member.
	Code string
	// Extensions are further members of the body. Names that collide with
	// the members above are skipped, so the standard members always win.
	// Values must be JSON-encodable.
	Extensions map[string]any
	// Header holds response headers that Write sends with the problem, such
	// as Retry-After or WWW-Authenticate. It is not part of the body.
	Header http.Header
}

// Error implements error, so a Problem can travel up a call stack as an error
// and be written at the edge.
func (p Problem) Error() string {
	s := fmt.Sprintf("problem %d", p.Status)
	if p.Code != "" {
		s += " " + p.Code
	}
	if p.Detail != "" {
		s += ": " + p.Detail
	}
	return s
}

// With returns a copy of p with the extension member name set to value. The
// original's Extensions map is not modified.
func (p Problem) With(name string, value any) Problem {
	ext := make(map[string]any, len(p.Extensions)+1)
	for k, v := range p.Extensions {
		ext[k] = v
	}
	ext[name] = value
	p.Extensions = ext
	return p
}

// WithInstance returns a copy of p with Instance set.
func (p Problem) WithInstance(instance string) Problem {
	p.Instance = instance
	return p
}

// MarshalJSON encodes p as a problem details object. Members come in a fixed
// order (type, title, status, detail, instance, code, then extensions sorted
// by name), so equal problems encode to equal bytes. Empty standard members
// are omitted.
func (p Problem) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	first := true
	member := func(name string, value any) error {
		v, err := json.Marshal(value)
		if err != nil {
			return fmt.Errorf("problem: member %q: %w", name, err)
		}
		if !first {
			buf.WriteByte(',')
		}
		first = false
		k, _ := json.Marshal(name) // a string always encodes
		buf.Write(k)
		buf.WriteByte(':')
		buf.Write(v)
		return nil
	}
	type std struct {
		name  string
		value any
		set   bool
	}
	for _, m := range []std{
		{"type", p.Type, p.Type != ""},
		{"title", p.Title, p.Title != ""},
		{"status", p.Status, p.Status != 0},
		{"detail", p.Detail, p.Detail != ""},
		{"instance", p.Instance, p.Instance != ""},
		{"code", p.Code, p.Code != ""},
	} {
		if !m.set {
			continue
		}
		if err := member(m.name, m.value); err != nil {
			return nil, err
		}
	}
	names := make([]string, 0, len(p.Extensions))
	for k := range p.Extensions {
		if !reserved(k) {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	for _, k := range names {
		if err := member(k, p.Extensions[k]); err != nil {
			return nil, err
		}
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// Encode returns the body of p as Write would send it, for callers that save
// a response to replay it later.
func Encode(p Problem) ([]byte, error) {
	return p.MarshalJSON()
}

// StatusOf returns the status Write sends for p: p.Status when it is in
// 400..599, else 500.
func StatusOf(p Problem) int {
	if p.Status < 400 || p.Status > 599 {
		return http.StatusInternalServerError
	}
	return p.Status
}

// Write sends p as the whole response: p.Header, Content-Type
// application/problem+json, the status (see StatusOf) and the encoded body.
//
// When p cannot be encoded (an extension value that JSON rejects), Write sends
// a plain 500 internal_error problem instead and returns the encoding error.
// An error writing the body is returned as is.
func Write(w http.ResponseWriter, p Problem) error {
	body, encErr := Encode(p)
	if encErr != nil {
		p = Internal("the error response could not be encoded")
		body, _ = Encode(p) // only strings and ints: cannot fail
	}
	h := w.Header()
	for k, vs := range p.Header {
		h[http.CanonicalHeaderKey(k)] = slices.Clone(vs)
	}
	h.Set("Content-Type", ContentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(StatusOf(p))
	if _, err := w.Write(body); err != nil {
		if encErr != nil {
			return fmt.Errorf("problem: %w (and writing the fallback: %w)", encErr, err)
		}
		return fmt.Errorf("problem: write body: %w", err)
	}
	return encErr
}

// New returns a problem with the given status, code, title and detail. Its
// type is TypePrefix followed by the code with '_' replaced by '-'.
func New(status int, code, title, detail string) Problem {
	return Problem{
		Type:   typeOf(code),
		Title:  title,
		Status: status,
		Detail: detail,
		Code:   code,
	}
}

func typeOf(code string) string {
	b := []byte(code)
	for i, c := range b {
		if c == '_' {
			b[i] = '-'
		}
	}
	return TypePrefix + string(b)
}

// InvalidRequest is a 400 for a malformed body or an invalid field. field
// names the offending field (the "field" member); pass "" when the problem is
// not about one field (for example malformed JSON).
func InvalidRequest(field, detail string) Problem {
	p := New(http.StatusBadRequest, CodeInvalidRequest, "Invalid request", detail)
	if field != "" {
		p = p.With("field", field)
	}
	return p
}

// InvalidIdempotencyKey is a 400 for a missing or invalid Idempotency-Key
// header.
func InvalidIdempotencyKey(detail string) Problem {
	return New(http.StatusBadRequest, CodeInvalidIdempotencyKey, "Invalid Idempotency-Key", detail)
}

// Unauthorized is a 401 for a missing, malformed, forged or expired bearer
// token. It carries the header WWW-Authenticate: Bearer realm="orders"
// (RFC 6750).
func Unauthorized(detail string) Problem {
	p := New(http.StatusUnauthorized, CodeUnauthorized, "Unauthorized", detail)
	p.Header = http.Header{"Www-Authenticate": {`Bearer realm="orders"`}}
	return p
}

// NotFound is a 404 for a resource that does not exist, such as an unknown
// order id in the path.
func NotFound(detail string) Problem {
	return New(http.StatusNotFound, CodeNotFound, "Not found", detail)
}

// FingerprintMismatch is a 409 for an Idempotency-Key that was already used
// with a different request (a different fingerprint).
func FingerprintMismatch() Problem {
	return New(http.StatusConflict, CodeFingerprintMismatch, "Idempotency-Key reused",
		"this Idempotency-Key was already used with a different request; use a new key for a new request")
}

// KeyReused is FingerprintMismatch as the IETF Idempotency-Key draft
// answers it: 422 Unprocessable Content, with the same type and code.
func KeyReused() Problem {
	p := FingerprintMismatch()
	p.Status = http.StatusUnprocessableEntity
	return p
}

// RequestInProgress is a 409 for a request whose Idempotency-Key another
// attempt is still processing, as the IETF Idempotency-Key draft answers
// it. retryAfter is sent as Retry-After (whole seconds, rounded up, at
// least 1).
func RequestInProgress(retryAfter time.Duration) Problem {
	p := New(http.StatusConflict, CodeRequestInProgress, "Request in progress",
		"a request with this Idempotency-Key is still being processed; retry later with the same key")
	p.Header = http.Header{"Retry-After": {RetryAfter(retryAfter)}}
	return p
}

// OutOfStock is a 409 for a product that has fewer units available than the
// quantity asked. It carries the members "productId" and "quantity".
func OutOfStock(productID string, quantity int) Problem {
	return New(http.StatusConflict, CodeOutOfStock, "Out of stock",
		fmt.Sprintf("not enough stock of product %q for quantity %d", productID, quantity)).
		With("productId", productID).
		With("quantity", quantity)
}

// ShortItem is a line of a cart that the stock cannot cover.
type ShortItem struct {
	ProductID string `json:"productId"`
	Quantity  int64  `json:"quantity"`
	Available int64  `json:"available"`
}

// CartOutOfStock is a 409 for a cart some of whose lines the stock cannot
// cover: nothing of the cart was sold. It carries the member "shortItems",
// the lines that are short, each with the units still available.
func CartOutOfStock(short []ShortItem) Problem {
	names := make([]string, len(short))
	for i, it := range short {
		names[i] = fmt.Sprintf("product %q (quantity %d, %d available)", it.ProductID, it.Quantity, it.Available)
	}
	return New(http.StatusConflict, CodeOutOfStock, "Out of stock",
		fmt.Sprintf("not enough stock for %d of the cart's lines: %s; nothing was sold", len(short), strings.Join(names, ", "))).
		With("shortItems", short)
}

// UnknownProduct is a 422 for a request that names a product that does not
// exist. It carries the member "productId".
func UnknownProduct(productID string) Problem {
	return New(http.StatusUnprocessableEntity, CodeUnknownProduct, "Unknown product",
		fmt.Sprintf("product %q does not exist", productID)).
		With("productId", productID)
}

// PayloadTooLarge is a 413 for a body larger than maxBytes. It carries the
// member "maxBytes".
func PayloadTooLarge(maxBytes int64) Problem {
	return New(http.StatusRequestEntityTooLarge, CodePayloadTooLarge, "Payload too large",
		fmt.Sprintf("the request body is larger than %d bytes", maxBytes)).
		With("maxBytes", maxBytes)
}

// Internal is a 500 for an unexpected failure. detail must not leak internals.
func Internal(detail string) Problem {
	return New(http.StatusInternalServerError, CodeInternal, "Internal error", detail)
}

// ServiceUnavailable is a 503 for a dependency that is down. retryAfter is
// sent as the Retry-After header in whole seconds, rounded up, at least 1.
func ServiceUnavailable(detail string, retryAfter time.Duration) Problem {
	p := New(http.StatusServiceUnavailable, CodeServiceUnavailable, "Service unavailable", detail)
	p.Header = http.Header{"Retry-After": {RetryAfter(retryAfter)}}
	return p
}

// OutcomeUnknown is a 503 for a request whose earlier attempt may or may not
// have taken effect, and the service cannot tell yet. The client should retry
// with the same Idempotency-Key after Retry-After (whole seconds, rounded up,
// at least 1).
func OutcomeUnknown(retryAfter time.Duration) Problem {
	p := New(http.StatusServiceUnavailable, CodeOutcomeUnknown, "Outcome unknown",
		"an earlier attempt with this Idempotency-Key may still take effect; retry later with the same key")
	p.Header = http.Header{"Retry-After": {RetryAfter(retryAfter)}}
	return p
}

// RetryAfter formats d as a Retry-After header value: whole seconds, rounded
// up, at least 1.
func RetryAfter(d time.Duration) string {
	s := d / time.Second
	if d%time.Second != 0 {
		s++
	}
	if s < 1 {
		s = 1
	}
	return strconv.FormatInt(int64(s), 10)
}
