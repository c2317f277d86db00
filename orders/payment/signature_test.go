package payment_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/orders/payment"
)

var (
	sigSecret = []byte("whsec_0123456789abcdef")
	sigBody   = []byte(`{"event_id":"evt_1","payment_request_id":"o1:pay","status":"SUCCEEDED","provider_ref":"ch_1"}`)
	sigNow    = time.Unix(1_800_000_000, 0)
)

func TestSignatureRoundTrip(t *testing.T) {
	h := payment.SignCallback(sigSecret, sigBody, sigNow)
	if !strings.HasPrefix(h, "t=1800000000,v1=") || len(h) != len("t=1800000000,v1=")+64 {
		t.Fatalf("header %q", h)
	}
	if err := payment.VerifyCallback(sigSecret, h, sigBody, sigNow, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	// Within the tolerance on either side.
	for _, d := range []time.Duration{-5 * time.Minute, -time.Second, time.Second, 5 * time.Minute} {
		if err := payment.VerifyCallback(sigSecret, h, sigBody, sigNow.Add(d), 5*time.Minute); err != nil {
			t.Fatalf("now%+v: %v", d, err)
		}
	}
	// Signing is deterministic and sub-second parts of t do not matter.
	if h2 := payment.SignCallback(sigSecret, sigBody, sigNow.Add(999*time.Millisecond)); h2 != h {
		t.Fatalf("%q != %q", h2, h)
	}
}

func TestSignatureRejects(t *testing.T) {
	good := payment.SignCallback(sigSecret, sigBody, sigNow)
	mac := good[len("t=1800000000,v1="):]
	cases := map[string]struct {
		secret []byte
		header string
		body   []byte
		now    time.Time
	}{
		"wrong secret":        {[]byte("other"), good, sigBody, sigNow},
		"empty secret":        {nil, good, sigBody, sigNow},
		"changed body":        {sigSecret, good, []byte(string(sigBody) + " "), sigNow},
		"empty body":          {sigSecret, good, nil, sigNow},
		"too old":             {sigSecret, good, sigBody, sigNow.Add(5*time.Minute + time.Second)},
		"from the future":     {sigSecret, good, sigBody, sigNow.Add(-5*time.Minute - time.Second)},
		"changed timestamp":   {sigSecret, "t=1800000001,v1=" + mac, sigBody, sigNow},
		"empty header":        {sigSecret, "", sigBody, sigNow},
		"no mac":              {sigSecret, "t=1800000000", sigBody, sigNow},
		"no timestamp":        {sigSecret, "v1=" + mac, sigBody, sigNow},
		"reordered":           {sigSecret, "v1=" + mac + ",t=1800000000", sigBody, sigNow},
		"spaces":              {sigSecret, "t=1800000000, v1=" + mac, sigBody, sigNow},
		"uppercase hex":       {sigSecret, "t=1800000000,v1=" + strings.ToUpper(mac), sigBody, sigNow},
		"leading zero":        {sigSecret, "t=01800000000,v1=" + mac, sigBody, sigNow},
		"plus sign":           {sigSecret, "t=+1800000000,v1=" + mac, sigBody, sigNow},
		"short mac":           {sigSecret, "t=1800000000,v1=" + mac[:62], sigBody, sigNow},
		"long mac":            {sigSecret, good + "00", sigBody, sigNow},
		"second mac":          {sigSecret, good + ",v1=" + mac, sigBody, sigNow},
		"not hex":             {sigSecret, "t=1800000000,v1=" + strings.Repeat("z", 64), sigBody, sigNow},
		"huge timestamp":      {sigSecret, "t=9223372036854775807,v1=" + mac, sigBody, sigNow},
		"very negative":       {sigSecret, "t=-9223372036854775808,v1=" + mac, sigBody, sigNow},
		"timestamp overflows": {sigSecret, "t=99999999999999999999,v1=" + mac, sigBody, sigNow},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			err := payment.VerifyCallback(c.secret, c.header, c.body, c.now, 5*time.Minute)
			if !errors.Is(err, payment.ErrBadSignature) {
				t.Fatalf("got %v, want ErrBadSignature", err)
			}
		})
	}
	if err := payment.VerifyCallback(sigSecret, good, sigBody, sigNow, 0); !errors.Is(err, payment.ErrBadSignature) || !errors.Is(err, payment.ErrInvalid) {
		t.Fatalf("zero tolerance: %v", err)
	}
	if err := payment.VerifyCallback(nil, good, sigBody, sigNow, time.Minute); !errors.Is(err, payment.ErrInvalid) {
		t.Fatalf("empty secret: %v", err)
	}
	if h := payment.SignCallback(nil, sigBody, sigNow); h != "" {
		t.Fatalf("empty secret signed: %q", h)
	}
}

// FuzzVerifyCallback: VerifyCallback never panics, every error matches
// ErrBadSignature, and it accepts a header only when it is exactly what
// SignCallback makes for the same secret and body.
func FuzzVerifyCallback(f *testing.F) {
	f.Add(sigSecret, payment.SignCallback(sigSecret, sigBody, sigNow), sigBody, int64(0))
	f.Add(sigSecret, payment.SignCallback(sigSecret, sigBody, sigNow), sigBody, int64(400))
	f.Add(sigSecret, payment.SignCallback(sigSecret, nil, sigNow), []byte{}, int64(-30))
	f.Add([]byte("k"), "t=1800000000,v1="+strings.Repeat("0", 64), []byte("x"), int64(0))
	f.Add([]byte("k"), "t=1800000000,v1=", []byte(""), int64(0))
	f.Add([]byte(""), "", []byte(""), int64(0))
	f.Add(sigSecret, "t=-1,v1="+strings.Repeat("a", 64), sigBody, int64(1<<40))
	f.Fuzz(func(t *testing.T, secret []byte, header string, body []byte, skew int64) {
		now := sigNow.Add(time.Duration(skew%(1<<20)) * time.Second)
		err := payment.VerifyCallback(secret, header, body, now, 5*time.Minute)
		if err != nil {
			if !errors.Is(err, payment.ErrBadSignature) {
				t.Fatalf("error %v does not match ErrBadSignature", err)
			}
		} else {
			ts, _, _ := strings.Cut(strings.TrimPrefix(header, "t="), ",")
			sec, perr := strconv.ParseInt(ts, 10, 64)
			if perr != nil {
				t.Fatalf("accepted %q with an unparsable timestamp", header)
			}
			if want := payment.SignCallback(secret, body, time.Unix(sec, 0)); header != want {
				t.Fatalf("accepted %q, SignCallback makes %q", header, want)
			}
		}
		// What SignCallback makes is accepted, when there is a secret.
		if len(secret) > 0 {
			h := payment.SignCallback(secret, body, now)
			if err := payment.VerifyCallback(secret, h, body, now, time.Second); err != nil {
				t.Fatalf("own signature %q refused: %v", h, err)
			}
		}
	})
}
