// Package request parses, validates and fingerprints a create-order request
// (the body of POST /orders) and validates its Idempotency-Key header.
//
// # Body
//
// The body is one JSON object:
//
//	{"productId": "42", "quantity": 1, "addressVersion": "v1", "couponId": null}
//
// Field rules (an "identifier" below is 1 to 64 bytes of visible ASCII,
// 0x21 to 0x7E: no spaces, no control characters, no non-ASCII):
//
//   - productId (required): an identifier given as a JSON string, or a
//     non-negative JSON integer of at most 64 digits. A number is normalised to
//     its decimal string, so 42 and "42" are the same product. Numbers with a
//     sign, a fraction or an exponent (-1, 4.2, 4e1, 1.0) are rejected.
//   - quantity (required): a JSON integer from 1 to 1000. Strings ("1"),
//     fractions (1.5, 1.0), exponents (1e2), zero, negatives and larger values
//     are rejected.
//   - addressVersion (required): an identifier given as a JSON string. It names
//     the version of the user's delivery address the order ships to, so two
//     requests for different address versions are different orders.
//   - couponId (optional): absent or null for no coupon, else an identifier
//     given as a JSON string. The empty string is rejected, not read as "no
//     coupon".
//
// A required field that is null counts as missing.
//
// # Carts
//
// A cart names several products in one order, in place of productId and
// quantity (a body with both forms is rejected):
//
//	{"items": [{"productId": "42", "quantity": 1}, {"productId": "7", "quantity": 2}], "addressVersion": "v1"}
//
// items holds 1 to MaxItems (20) lines, each an object with productId and
// quantity under the rules above (unknown fields ignored, names checked as
// at the top level). The lines are sorted by product id. A line repeated
// verbatim counts once; the same product on two lines with different
// quantities is rejected, since which one was meant is unknown. A cart of
// one product is the single-product order, with its fingerprint. Errors
// name the line: "items[2].quantity".
//
// # Unknown fields, duplicates and case
//
// Unknown top-level fields (trace ids, client metadata) are allowed and
// ignored, as long as they are valid JSON; they never change the fingerprint.
// Field names are case-sensitive, and a name that differs from a known field
// only in case ("ProductId", "couponID") is rejected with ErrInvalidField
// rather than ignored, so that a misspelt optional field cannot silently drop
// a coupon. A top-level name that appears twice is rejected with
// ErrDuplicateField, whether or not it is known, because parsers disagree on
// which copy wins. Names are compared after JSON unescaping, so "productId"
// and "product\u0049d" are the same name.
//
// # Size and syntax
//
// The body is read through a limit of MaxBodyBytes (64 KiB) unless
// WithMaxBytes says otherwise; a longer body fails with ErrTooLarge, as does a
// read that stops with *http.MaxBytesError. Empty bodies, bodies that are not
// one JSON object (arrays, strings, null), invalid JSON and any data after the
// object other than whitespace fail with ErrMalformed.
//
// # Errors
//
// Every client error is an *Error that names the field (empty when the problem
// is not about one field) and says why in words fit for a response. It wraps
// one of the sentinel errors, so callers can branch with errors.Is and build
// the message from Error.Field and Error.Reason.
//
// # Fingerprint
//
// Order.Canonical is the canonical JSON form of exactly the four business
// fields, in the fixed order productId, quantity, addressVersion, couponId,
// without whitespace, with productId always a string and couponId null when
// there is no coupon:
//
//	{"productId":"42","quantity":1,"addressVersion":"v1","couponId":null}
//
// A cart's canonical form puts its sorted lines first:
//
//	{"items":[{"productId":"42","quantity":1},{"productId":"7","quantity":2}],"addressVersion":"v1","couponId":null}
//
// Order.Fingerprint is the lowercase hex SHA-256 of those bytes. Field order,
// whitespace, escapes, the number form of productId and unknown fields do not
// change it, nor does the order of a cart's lines; any change to a
// business field does. The canonical form is part
// of the API contract: changing it makes stored fingerprints disagree with new
// ones.
//
// # Idempotency-Key
//
// The Idempotency-Key header must appear exactly once and hold 1 to 255 bytes
// of visible ASCII (0x21 to 0x7E). Spaces are not allowed: HTTP strips them at
// the ends of a field value, so a key with spaces could not round-trip
// reliably. The key is used verbatim (case-sensitive, quotes included).
// UUIDs, ULIDs and base64url tokens all fit.
package request

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/quorumlock/quorumlock/internal/option"
)

// Limits of the order path. They are the one set: the store, the
// idempotency records and the token verifier use these constants rather
// than limits of their own, so that a value accepted at the edge is never
// refused further down, and the reverse.
const (
	// MaxBodyBytes is the default limit on the size of a body.
	MaxBodyBytes = 64 << 10
	// MaxIDLen is the longest productId, addressVersion or couponId, in bytes.
	MaxIDLen = 64
	// MinQuantity and MaxQuantity bound quantity, inclusive.
	MinQuantity = 1
	MaxQuantity = 1000
	// MaxIdempotencyKeyLen is the longest Idempotency-Key, in bytes.
	MaxIdempotencyKeyLen = 255
	// MaxUserIDLen is the longest user id (a token's sub), in bytes.
	MaxUserIDLen = 128
	// IdempotencyKeyHeader is the name of the idempotency header.
	IdempotencyKeyHeader = "Idempotency-Key"
	// MaxItems is the most lines a cart (the items field) may hold.
	MaxItems = 20
)

// Field names of the body, as they appear in JSON.
const (
	FieldProductID      = "productId"
	FieldQuantity       = "quantity"
	FieldAddressVersion = "addressVersion"
	FieldCouponID       = "couponId"
	FieldItems          = "items"
)

// Sentinel errors. Errors returned by this package wrap exactly one of them.
var (
	// ErrTooLarge: the body is larger than the limit.
	ErrTooLarge = errors.New("request body too large")
	// ErrMalformed: the body is not one well-formed JSON object.
	ErrMalformed = errors.New("malformed request body")
	// ErrMissingField: a required field is absent or null.
	ErrMissingField = errors.New("missing field")
	// ErrInvalidField: a field has the wrong type or an invalid value, or a
	// name differs from a known field only in case.
	ErrInvalidField = errors.New("invalid field")
	// ErrDuplicateField: a top-level name appears more than once.
	ErrDuplicateField = errors.New("duplicate field")
	// ErrRead: reading the body failed (the client went away, for example).
	// This is not a validation failure.
	ErrRead = errors.New("reading request body failed")
	// ErrMissingIdempotencyKey: the Idempotency-Key header is absent or empty.
	ErrMissingIdempotencyKey = errors.New("missing Idempotency-Key")
	// ErrInvalidIdempotencyKey: the Idempotency-Key header is invalid or
	// repeated.
	ErrInvalidIdempotencyKey = errors.New("invalid Idempotency-Key")
	// ErrConfig: an option is invalid (nil). It is the caller's mistake,
	// not the client's, and nothing was read.
	ErrConfig = errors.New("invalid option")
)

// errOption is what a nil option's error wraps.
var errOption = fmt.Errorf("request: %w", ErrConfig)

// Error is a request error: which field, why, and the sentinel it wraps.
type Error struct {
	// Field is the JSON field name or header name concerned, or "" when the
	// error is about the body as a whole.
	Field string
	// Reason says what is wrong, in words fit for a client.
	Reason string
	// Err is the sentinel error (ErrMalformed, ErrInvalidField, ...).
	Err error
}

// Error implements error.
func (e *Error) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("request: %v: %s", e.Err, e.Reason)
	}
	return fmt.Sprintf("request: %v %q: %s", e.Err, e.Field, e.Reason)
}

// Unwrap returns the sentinel error.
func (e *Error) Unwrap() error { return e.Err }

func errf(sentinel error, field, format string, args ...any) *Error {
	return &Error{Field: field, Reason: fmt.Sprintf(format, args...), Err: sentinel}
}

// Order is a validated create-order request. The zero value is not valid.
type Order struct {
	// ProductID is the product, always in string form ("42").
	ProductID string
	// Quantity is the number of units, MinQuantity..MaxQuantity.
	Quantity int
	// AddressVersion is the version of the delivery address.
	AddressVersion string
	// CouponID is the coupon, or "" for none.
	CouponID string
	// Items is a cart's lines: two or more, sorted by product id, one per
	// product; nil for a single-product order, whose line is ProductID and
	// Quantity (zero in a cart). A one-line cart is read as that order.
	Items []Line
}

// HasCoupon reports whether the order uses a coupon.
func (o Order) HasCoupon() bool { return o.CouponID != "" }

// Validate checks o against the field rules of the package documentation.
// Orders returned by Parse are always valid; Validate is for orders built in
// code.
func (o Order) Validate() error {
	if o.Items != nil {
		if err := validateCart(o); err != nil {
			return err
		}
	} else if err := validateLine("", Line{ProductID: o.ProductID, Quantity: o.Quantity}); err != nil {
		return err
	}
	if o.AddressVersion == "" {
		return errf(ErrMissingField, FieldAddressVersion, "is required")
	}
	if err := checkID(FieldAddressVersion, o.AddressVersion); err != nil {
		return err
	}
	if o.CouponID != "" {
		return checkID(FieldCouponID, o.CouponID)
	}
	return nil
}

// validateLine checks one line; prefix names it in errors ("items[1].").
func validateLine(prefix string, l Line) error {
	if l.ProductID == "" {
		return errf(ErrMissingField, prefix+FieldProductID, "is required")
	}
	if err := checkID(prefix+FieldProductID, l.ProductID); err != nil {
		return err
	}
	if l.Quantity < MinQuantity || l.Quantity > MaxQuantity {
		return errf(ErrInvalidField, prefix+FieldQuantity, "must be an integer from %d to %d", MinQuantity, MaxQuantity)
	}
	return nil
}

// Canonical returns the canonical JSON encoding of the business fields, the
// input of Fingerprint. See the package documentation for the format. It is
// defined for any Order; for a valid one it is also accepted by Parse and
// yields an equal Order.
func (o Order) Canonical() []byte {
	b := make([]byte, 0, 96+len(o.ProductID)+len(o.AddressVersion)+len(o.CouponID)+48*len(o.Items))
	if o.Items != nil {
		b = appendItems(b, o.Items)
	} else {
		b = append(b, '{')
		b = appendLine(b, Line{ProductID: o.ProductID, Quantity: o.Quantity})
	}
	b = append(b, `,"addressVersion":`...)
	b = appendString(b, o.AddressVersion)
	b = append(b, `,"couponId":`...)
	if o.CouponID == "" {
		b = append(b, "null"...)
	} else {
		b = appendString(b, o.CouponID)
	}
	return append(b, '}')
}

// Fingerprint returns the lowercase hex SHA-256 of Canonical: 64 characters.
func (o Order) Fingerprint() string {
	sum := sha256.Sum256(o.Canonical())
	return hex.EncodeToString(sum[:])
}

// appendString appends s as a JSON string. Every byte has exactly one
// encoding, so the result is injective in s: '"' and '\' are escaped, control
// bytes become \u00XX and all other bytes are copied.
func appendString(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// Option configures Parse and ParseBytes. A nil option is an error
// wrapping ErrConfig.
type Option func(*config) error

type config struct {
	maxBytes int64
}

// WithMaxBytes sets the body size limit. Values below 1 keep the default,
// MaxBodyBytes.
func WithMaxBytes(n int64) Option {
	return func(c *config) error {
		if n > 0 {
			c.maxBytes = n
		}
		return nil
	}
}

func newConfig(opts []Option) (config, error) {
	c := config{maxBytes: MaxBodyBytes}
	err := option.Apply(&c, opts, errOption)
	return c, err
}

// Parse reads at most the size limit plus one byte from r and parses the
// body. Errors are *Error values wrapping ErrTooLarge, ErrMalformed,
// ErrMissingField, ErrInvalidField or ErrDuplicateField, or an error wrapping
// ErrRead when r fails. An *http.MaxBytesError from r (http.MaxBytesReader)
// counts as ErrTooLarge. A nil option is an error wrapping ErrConfig, and
// then nothing is read.
func Parse(r io.Reader, opts ...Option) (Order, error) {
	c, err := newConfig(opts)
	if err != nil {
		return Order{}, err
	}
	data, err := io.ReadAll(io.LimitReader(r, c.maxBytes+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return Order{}, errf(ErrTooLarge, "", "the body is larger than %d bytes", mbe.Limit)
		}
		return Order{}, fmt.Errorf("request: %w: %w", ErrRead, err)
	}
	return parse(data, c)
}

// ParseBytes parses a body held in memory, with the same rules and errors as
// Parse.
func ParseBytes(data []byte, opts ...Option) (Order, error) {
	c, err := newConfig(opts)
	if err != nil {
		return Order{}, err
	}
	return parse(data, c)
}

// Indexes of the top-level fields.
const (
	idxProductID = iota
	idxQuantity
	idxAddressVersion
	idxCouponID
	idxItems
	numFields
)

// topFields are the top-level field names, by index.
var topFields = []string{FieldProductID, FieldQuantity, FieldAddressVersion, FieldCouponID, FieldItems}

func parse(data []byte, c config) (Order, error) {
	if int64(len(data)) > c.maxBytes {
		return Order{}, errf(ErrTooLarge, "", "the body is larger than %d bytes", c.maxBytes)
	}
	raw, err := scanObject(data, "", topFields)
	if err != nil {
		return Order{}, err
	}
	var o Order
	if isNull(raw[idxItems]) {
		l, err := parseLine("", raw[idxProductID], raw[idxQuantity])
		if err != nil {
			return Order{}, err
		}
		o.ProductID, o.Quantity = l.ProductID, l.Quantity
	} else if o, err = parseCart(raw); err != nil {
		return Order{}, err
	}
	if o.AddressVersion, err = idString(FieldAddressVersion, raw[idxAddressVersion], true); err != nil {
		return Order{}, err
	}
	if o.CouponID, err = idString(FieldCouponID, raw[idxCouponID], false); err != nil {
		return Order{}, err
	}
	return o, nil
}

// parseLine reads a product and its quantity; prefix names the line in
// errors.
func parseLine(prefix string, product, qty json.RawMessage) (Line, error) {
	var l Line
	var err error
	if l.ProductID, err = productID(prefix+FieldProductID, product); err != nil {
		return Line{}, err
	}
	if l.Quantity, err = quantity(prefix+FieldQuantity, qty); err != nil {
		return Line{}, err
	}
	return l, nil
}

// scanObject checks that data is exactly one JSON object (plus whitespace)
// with no duplicate names, and returns the raw values of the names (nil
// when absent). prefix names the object in errors ("items[2].").
func scanObject(data []byte, prefix string, names []string) ([]json.RawMessage, error) {
	raw := make([]json.RawMessage, len(names))
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err == io.EOF {
		return raw, errf(ErrMalformed, "", "the body is empty")
	}
	if err != nil {
		return raw, errf(ErrMalformed, "", "invalid JSON: %v", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		if prefix != "" {
			return raw, errf(ErrInvalidField, strings.TrimSuffix(prefix, "."), "must be a JSON object")
		}
		return raw, errf(ErrMalformed, "", "the body must be a JSON object")
	}
	seen := make(map[string]struct{})
	// Each iteration consumes at least one byte of data, so the loop is
	// bounded by len(data).
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return raw, errf(ErrMalformed, "", "invalid JSON: %v", err)
		}
		name, ok := tok.(string)
		if !ok {
			return raw, errf(ErrMalformed, "", "invalid JSON: expected a field name")
		}
		if _, dup := seen[name]; dup {
			return raw, errf(ErrDuplicateField, prefix+name, "appears more than once")
		}
		seen[name] = struct{}{}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return raw, errf(ErrMalformed, prefix+name, "invalid JSON value: %v", err)
		}
		// A known name keeps its value; an unknown one is ignored.
		for i, k := range names {
			if name == k {
				raw[i] = v
				break
			}
			if strings.EqualFold(name, k) {
				return raw, errf(ErrInvalidField, prefix+name, "unknown field; field names are case-sensitive, did you mean %q?", k)
			}
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return raw, errf(ErrMalformed, "", "invalid JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return raw, errf(ErrMalformed, "", "unexpected data after the JSON object")
	}
	return raw, nil
}

func isNull(v json.RawMessage) bool {
	return v == nil || string(v) == "null"
}

// checkID applies the identifier rule: 1..MaxIDLen bytes of 0x21..0x7E.
func checkID(field, s string) error {
	if s == "" {
		return errf(ErrInvalidField, field, "must not be empty")
	}
	if len(s) > MaxIDLen {
		return errf(ErrInvalidField, field, "must be at most %d bytes long", MaxIDLen)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c > 0x7e {
			return errf(ErrInvalidField, field, "must contain only visible ASCII characters (no spaces)")
		}
	}
	return nil
}

// idString decodes an identifier given as a JSON string.
func idString(field string, v json.RawMessage, required bool) (string, error) {
	if isNull(v) {
		if required {
			return "", errf(ErrMissingField, field, "is required")
		}
		return "", nil
	}
	if v[0] != '"' {
		return "", errf(ErrInvalidField, field, "must be a string")
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", errf(ErrInvalidField, field, "must be a string")
	}
	if err := checkID(field, s); err != nil {
		return "", err
	}
	return s, nil
}

// integerLiteral classifies a JSON number literal: whether it is a plain
// non-negative integer (digits only), and whether it is negative.
func integerLiteral(v json.RawMessage) (digits, negative bool) {
	s := string(v)
	if strings.HasPrefix(s, "-") {
		return false, true
	}
	if s == "" {
		return false, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false, false
		}
	}
	return true, false
}

func isNumber(v json.RawMessage) bool {
	return len(v) > 0 && (v[0] == '-' || (v[0] >= '0' && v[0] <= '9'))
}

func productID(field string, v json.RawMessage) (string, error) {
	if isNull(v) {
		return "", errf(ErrMissingField, field, "is required")
	}
	if v[0] == '"' {
		return idString(field, v, true)
	}
	if !isNumber(v) {
		return "", errf(ErrInvalidField, field, "must be a string or a non-negative integer")
	}
	digits, negative := integerLiteral(v)
	switch {
	case negative:
		return "", errf(ErrInvalidField, field, "must not be negative")
	case !digits:
		return "", errf(ErrInvalidField, field, "must be an integer, without fraction or exponent")
	case len(v) > MaxIDLen:
		return "", errf(ErrInvalidField, field, "must be at most %d digits long", MaxIDLen)
	}
	// JSON forbids leading zeros, so the literal is already the decimal form.
	return string(v), nil
}

func quantity(field string, v json.RawMessage) (int, error) {
	if isNull(v) {
		return 0, errf(ErrMissingField, field, "is required")
	}
	if !isNumber(v) {
		return 0, errf(ErrInvalidField, field, "must be a JSON integer")
	}
	digits, negative := integerLiteral(v)
	rangeErr := errf(ErrInvalidField, field, "must be an integer from %d to %d", MinQuantity, MaxQuantity)
	switch {
	case negative:
		return 0, rangeErr
	case !digits:
		return 0, errf(ErrInvalidField, field, "must be an integer, without fraction or exponent")
	case len(v) > 4: // more than 9999
		return 0, rangeErr
	}
	n, err := strconv.Atoi(string(v))
	if err != nil || n < MinQuantity || n > MaxQuantity {
		return 0, rangeErr
	}
	return n, nil
}

// Key is a checked Idempotency-Key: 1 to MaxIdempotencyKeyLen bytes of
// visible ASCII (0x21..0x7E), used verbatim. The key is checked once, where
// it enters (IdempotencyKey or ParseKey); the layers below take a Key and
// do not check it again. The zero Key is no key, and they refuse it.
type Key struct{ s string }

// String returns the key as the client sent it.
func (k Key) String() string { return k.s }

// IsZero reports whether k is the zero Key (no key).
func (k Key) IsZero() bool { return k.s == "" }

// IdempotencyKey returns the Idempotency-Key of a request's header after
// checking it: present exactly once and valid per ParseKey. Errors are
// *Error values wrapping ErrMissingIdempotencyKey or
// ErrInvalidIdempotencyKey.
func IdempotencyKey(h http.Header) (Key, error) {
	vals := h.Values(IdempotencyKeyHeader)
	switch {
	case len(vals) == 0 || (len(vals) == 1 && vals[0] == ""):
		return Key{}, errf(ErrMissingIdempotencyKey, IdempotencyKeyHeader, "the header is required")
	case len(vals) > 1:
		return Key{}, errf(ErrInvalidIdempotencyKey, IdempotencyKeyHeader, "the header must appear once")
	}
	return ParseKey(vals[0])
}

// ParseKey checks one key: 1 to MaxIdempotencyKeyLen bytes of visible
// ASCII (0x21..0x7E). The empty key wraps ErrMissingIdempotencyKey, any
// other invalid key ErrInvalidIdempotencyKey.
func ParseKey(key string) (Key, error) {
	if key == "" {
		return Key{}, errf(ErrMissingIdempotencyKey, IdempotencyKeyHeader, "the header is required")
	}
	if len(key) > MaxIdempotencyKeyLen {
		return Key{}, errf(ErrInvalidIdempotencyKey, IdempotencyKeyHeader, "must be at most %d characters long", MaxIdempotencyKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x21 || c > 0x7e {
			return Key{}, errf(ErrInvalidIdempotencyKey, IdempotencyKeyHeader, "must contain only visible ASCII characters (no spaces)")
		}
	}
	return Key{s: key}, nil
}

// MustKey is ParseKey for keys known to be valid (constants in tests and
// examples); it panics on an invalid key.
func MustKey(key string) Key {
	k, err := ParseKey(key)
	if err != nil {
		panic(err)
	}
	return k
}
