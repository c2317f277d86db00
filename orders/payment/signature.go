package payment

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SignatureHeader is the HTTP header that carries a provider callback's
// signature, as made by [SignCallback].
const SignatureHeader = "Fakepay-Signature"

// ErrBadSignature reports a callback whose signature header is malformed,
// does not match the body, or is too old or too far in the future.
var ErrBadSignature = errors.New("payment: bad callback signature")

// maxSignatureHeader bounds the header VerifyCallback parses: a valid one
// is about 90 bytes.
const maxSignatureHeader = 256

// SignCallback returns the [SignatureHeader] value of a callback body sent
// at t:
//
//	t=<unix seconds>,v1=<lowercase hex HMAC-SHA256 of "<unix seconds>.<body>">
//
// The timestamp is part of the signed text, so a captured callback cannot
// be replayed later than the receiver's tolerance. An empty secret signs
// nothing: SignCallback returns "", which [VerifyCallback] rejects.
func SignCallback(secret []byte, body []byte, t time.Time) string {
	if len(secret) == 0 {
		return ""
	}
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(callbackMAC(secret, ts, body))
}

// VerifyCallback checks a [SignatureHeader] value against the body with
// the shared secret: the header must be exactly as [SignCallback] makes
// it, its MAC must match (compared in constant time), and its timestamp
// must be within tolerance of now, either way. It returns nil or an error
// matching [ErrBadSignature]; an empty secret or a tolerance that is not
// positive is refused with an error matching ErrBadSignature and
// [ErrInvalid].
func VerifyCallback(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	if len(secret) == 0 {
		return fmt.Errorf("%w: %w: empty secret", ErrBadSignature, ErrInvalid)
	}
	if tolerance <= 0 {
		return fmt.Errorf("%w: %w: tolerance %v is not positive", ErrBadSignature, ErrInvalid, tolerance)
	}
	ts, sec, mac, ok := parseSignature(header)
	if !ok {
		return fmt.Errorf("%w: malformed %s header", ErrBadSignature, SignatureHeader)
	}
	// Compare whole seconds first so that no arithmetic below can overflow
	// on an absurd timestamp, then the exact distance.
	nowSec, tolSec := now.Unix(), int64(tolerance/time.Second)+1
	if sec > nowSec+tolSec || sec < nowSec-tolSec {
		return fmt.Errorf("%w: timestamp %d is outside %v of now", ErrBadSignature, sec, tolerance)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: timestamp %d is outside %v of now", ErrBadSignature, sec, tolerance)
	}
	if !hmac.Equal(mac, callbackMAC(secret, ts, body)) {
		return fmt.Errorf("%w: signature does not match the body", ErrBadSignature)
	}
	return nil
}

// callbackMAC is the HMAC-SHA256 of "<ts>.<body>".
func callbackMAC(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// parseSignature splits a header in the exact form SignCallback makes: a
// canonical decimal timestamp and 64 lowercase hex digits. Anything else
// (spaces, reordered or repeated fields, uppercase hex, leading zeros) is
// malformed, so an accepted header is always one SignCallback could have
// produced.
func parseSignature(h string) (ts string, sec int64, mac []byte, ok bool) {
	if len(h) > maxSignatureHeader {
		return "", 0, nil, false
	}
	rest, found := strings.CutPrefix(h, "t=")
	if !found {
		return "", 0, nil, false
	}
	ts, hexMAC, found := strings.Cut(rest, ",v1=")
	if !found {
		return "", 0, nil, false
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || strconv.FormatInt(sec, 10) != ts {
		return "", 0, nil, false
	}
	if len(hexMAC) != 2*sha256.Size {
		return "", 0, nil, false
	}
	for i := 0; i < len(hexMAC); i++ {
		if c := hexMAC[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", 0, nil, false
		}
	}
	mac, err = hex.DecodeString(hexMAC)
	if err != nil {
		return "", 0, nil, false
	}
	return ts, sec, mac, true
}
