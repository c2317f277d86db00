package auth_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/quorumlock/quorumlock/orders/auth"
)

// secret is the HS256 secret of the tests.
const secret = "0123456789abcdef0123456789abcdef"

// testSecret returns a fresh copy of the test secret.
func testSecret() []byte { return []byte(secret) }

// t0 returns the fixed "now" of most tests.
func t0() time.Time { return time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC) }

func fixedClock(t time.Time) func() time.Time { return func() time.Time { return t } }

func newVerifier(t testing.TB, opts ...auth.Option) *auth.Verifier {
	t.Helper()
	v, err := auth.NewVerifier(testSecret(), append([]auth.Option{auth.WithClock(fixedClock(t0()))}, opts...)...)
	if err != nil {
		t.Fatalf("NewVerifier: %v", err)
	}
	return v
}

func mint(t testing.TB, user string, ttl time.Duration, at time.Time) string {
	t.Helper()
	tok, err := auth.Mint(testSecret(), user, ttl, auth.WithClock(fixedClock(at)))
	if err != nil {
		t.Fatalf("Mint: %v", err)
	}
	return tok
}

// sign signs arbitrary claims with the given method and key.
func sign(t testing.TB, m jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(m, claims).SignedString(key)
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
	return s
}

func TestVerifyValid(t *testing.T) {
	v := newVerifier(t)
	tok := mint(t, "u1001", time.Hour, t0())
	for _, h := range []string{"Bearer " + tok, "bearer " + tok, "BEARER " + tok} {
		user, err := v.Verify(context.Background(), h)
		if err != nil || user != "u1001" {
			t.Fatalf("Verify(%q) = %q, %v; want u1001", h[:10], user, err)
		}
	}
	// A user id with ':' and the maximum length is fine: it is opaque here.
	long := strings.Repeat("u", auth.MaxSubjectLen-2) + ":x"
	if user, err := v.Verify(context.Background(), "Bearer "+mint(t, long, time.Minute, t0())); err != nil || user != long {
		t.Fatalf("Verify long sub = %q, %v", user, err)
	}
}

func TestVerifyExpiry(t *testing.T) {
	tok := mint(t, "u1", time.Minute, t0()) // exp = t0()+60s
	at := func(now time.Time, opts ...auth.Option) error {
		v, err := auth.NewVerifier(testSecret(), append([]auth.Option{auth.WithClock(fixedClock(now))}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		_, err = v.Verify(context.Background(), "Bearer "+tok)
		return err
	}
	if err := at(t0().Add(59 * time.Second)); err != nil {
		t.Fatalf("before exp: %v", err)
	}
	if err := at(t0().Add(61 * time.Second)); !errors.Is(err, auth.ErrExpiredToken) {
		t.Fatalf("after exp: err = %v, want ErrExpiredToken", err)
	}
	if err := at(t0().Add(61*time.Second), auth.WithLeeway(5*time.Second)); err != nil {
		t.Fatalf("after exp within leeway: %v", err)
	}
	if err := at(t0().Add(66*time.Second), auth.WithLeeway(5*time.Second)); !errors.Is(err, auth.ErrExpiredToken) {
		t.Fatalf("after exp beyond leeway: err = %v, want ErrExpiredToken", err)
	}
	// Expired and forged: the signature failure wins.
	forged := tok[:len(tok)-2] + flip(tok[len(tok)-2]) + tok[len(tok)-1:]
	if err := at(t0().Add(time.Hour)); !errors.Is(err, auth.ErrExpiredToken) {
		t.Fatal(err)
	}
	v, _ := auth.NewVerifier(testSecret(), auth.WithClock(fixedClock(t0().Add(time.Hour))))
	if _, err := v.Verify(context.Background(), "Bearer "+forged); !errors.Is(err, auth.ErrInvalidToken) || errors.Is(err, auth.ErrExpiredToken) {
		t.Fatalf("expired forged token: err = %v, want only ErrInvalidToken", err)
	}
}

// flip returns a different base64url character.
func flip(c byte) string {
	if c == 'A' {
		return "B"
	}
	return "A"
}

func TestVerifyRejects(t *testing.T) {
	v := newVerifier(t)
	good := mint(t, "u1", time.Hour, t0())
	parts := strings.Split(good, ".")
	exp := t0().Add(time.Hour).Unix()
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	none := sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, jwt.MapClaims{"sub": "u1", "exp": exp})

	cases := []struct {
		name   string
		header string
		want   error
	}{
		{"empty header", "", auth.ErrMissingToken},
		{"scheme only", "Bearer", auth.ErrInvalidToken},
		{"scheme and space", "Bearer ", auth.ErrInvalidToken},
		{"no scheme", good, auth.ErrInvalidToken},
		{"other scheme", "Basic dTE6cGFzcw==", auth.ErrInvalidToken},
		{"scheme glued", "Bearer" + good, auth.ErrInvalidToken},
		{"two spaces", "Bearer  " + good, auth.ErrInvalidToken},
		{"tab separator", "Bearer\t" + good, auth.ErrInvalidToken},
		{"leading space", " Bearer " + good, auth.ErrInvalidToken},
		{"trailing space", "Bearer " + good + " ", auth.ErrInvalidToken},
		{"two tokens", "Bearer " + good + " " + good, auth.ErrInvalidToken},
		{"padding", "Bearer " + good + "=", auth.ErrInvalidToken},
		{"too long", "Bearer " + strings.Repeat("a", auth.MaxTokenLen+1), auth.ErrInvalidToken},
		{"not a jwt", "Bearer abc", auth.ErrInvalidToken},
		{"two segments", "Bearer " + parts[0] + "." + parts[1], auth.ErrInvalidToken},
		{"empty signature", "Bearer " + parts[0] + "." + parts[1] + ".", auth.ErrInvalidToken},

		{"wrong secret", "Bearer " + sign(t, jwt.SigningMethodHS256, []byte("another-secret-of-32-bytes-long!"), jwt.MapClaims{"sub": "u1", "exp": exp}), auth.ErrInvalidToken},
		{"tampered payload", "Bearer " + parts[0] + "." + mustPayload(t, jwt.MapClaims{"sub": "admin", "exp": exp}) + "." + parts[2], auth.ErrInvalidToken},
		{"tampered signature", "Bearer " + parts[0] + "." + parts[1] + "." + flip(parts[2][0]) + parts[2][1:], auth.ErrInvalidToken},
		{"non-canonical signature bits", "Bearer " + parts[0] + "." + parts[1] + "." + parts[2][:len(parts[2])-1] + sameBits(parts[2][len(parts[2])-1]), auth.ErrInvalidToken},

		{"alg none", "Bearer " + none, auth.ErrInvalidToken},
		{"alg none, no signature, valid header", "Bearer " + strings.TrimSuffix(none, "."), auth.ErrInvalidToken},
		{"HS512 same secret", "Bearer " + sign(t, jwt.SigningMethodHS512, testSecret(), jwt.MapClaims{"sub": "u1", "exp": exp}), auth.ErrInvalidToken},
		{"HS384 same secret", "Bearer " + sign(t, jwt.SigningMethodHS384, testSecret(), jwt.MapClaims{"sub": "u1", "exp": exp}), auth.ErrInvalidToken},
		{"RS256", "Bearer " + sign(t, jwt.SigningMethodRS256, rsaKey, jwt.MapClaims{"sub": "u1", "exp": exp}), auth.ErrInvalidToken},

		{"missing sub", "Bearer " + sign(t, jwt.SigningMethodHS256, testSecret(), jwt.MapClaims{"exp": exp}), auth.ErrInvalidToken},
		{"empty sub", "Bearer " + sign(t, jwt.SigningMethodHS256, testSecret(), jwt.MapClaims{"sub": "", "exp": exp}), auth.ErrInvalidToken},
		{"numeric sub", "Bearer " + sign(t, jwt.SigningMethodHS256, testSecret(), jwt.MapClaims{"sub": 1001, "exp": exp}), auth.ErrInvalidToken},
		{"sub with space", "Bearer " + sign(t, jwt.SigningMethodHS256, testSecret(), jwt.MapClaims{"sub": "u 1", "exp": exp}), auth.ErrInvalidToken},
		{"sub non-ascii", "Bearer " + sign(t, jwt.SigningMethodHS256, testSecret(), jwt.MapClaims{"sub": "usér", "exp": exp}), auth.ErrInvalidToken},
		{"sub too long", "Bearer " + sign(t, jwt.SigningMethodHS256, testSecret(), jwt.MapClaims{"sub": strings.Repeat("u", auth.MaxSubjectLen+1), "exp": exp}), auth.ErrInvalidToken},
		{"missing exp", "Bearer " + sign(t, jwt.SigningMethodHS256, testSecret(), jwt.MapClaims{"sub": "u1"}), auth.ErrInvalidToken},
		{"string exp", "Bearer " + sign(t, jwt.SigningMethodHS256, testSecret(), jwt.MapClaims{"sub": "u1", "exp": "tomorrow"}), auth.ErrInvalidToken},
		{"nbf in future", "Bearer " + sign(t, jwt.SigningMethodHS256, testSecret(), jwt.MapClaims{"sub": "u1", "exp": exp, "nbf": t0().Add(time.Minute).Unix()}), auth.ErrInvalidToken},
		{"iat in future", "Bearer " + sign(t, jwt.SigningMethodHS256, testSecret(), jwt.MapClaims{"sub": "u1", "exp": exp, "iat": t0().Add(time.Minute).Unix()}), auth.ErrInvalidToken},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			user, err := v.Verify(context.Background(), tc.header)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Verify = %q, %v; want %v", user, err, tc.want)
			}
			if user != "" {
				t.Fatalf("rejected token returned user %q", user)
			}
			if tc.want != auth.ErrExpiredToken && errors.Is(err, auth.ErrExpiredToken) {
				t.Fatalf("err %v also claims expiry", err)
			}
		})
	}
}

// sameBits returns a base64url character whose top two bits equal c's but
// whose low four bits differ. The last character of a 32-byte signature
// carries two data bits and four padding bits, so swapping it yields the same
// bytes under lenient decoding; strict decoding must reject it.
func sameBits(c byte) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	i := strings.IndexByte(alphabet, c)
	return string(alphabet[(i&^0xf)|((i+1)&0xf)])
}

func mustPayload(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	s := sign(t, jwt.SigningMethodHS256, []byte("whatever-secret-0123456789"), claims)
	return strings.Split(s, ".")[1]
}

func TestVerifyCancelledContext(t *testing.T) {
	v := newVerifier(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := v.Verify(ctx, "Bearer "+mint(t, "u1", time.Hour, t0())); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestNewVerifier(t *testing.T) {
	for _, s := range [][]byte{nil, {}, []byte("fifteen-bytes!!"), []byte("sixteen-bytes!!!")} {
		if _, err := auth.NewVerifier(s); !errors.Is(err, auth.ErrWeakSecret) {
			t.Errorf("NewVerifier(%d bytes) err = %v, want ErrWeakSecret", len(s), err)
		}
	}
	if _, err := auth.NewVerifier([]byte("thirty-two-bytes-of-secret-xxxxx")); err != nil {
		t.Errorf("32-byte secret: %v", err)
	}
	for _, o := range []auth.Option{auth.WithLeeway(-time.Second), auth.WithLeeway(auth.MaxLeeway + 1), auth.WithClock(nil)} {
		if _, err := auth.NewVerifier(testSecret(), o); !errors.Is(err, auth.ErrInvalidArgument) {
			t.Errorf("bad option err = %v, want ErrInvalidArgument", err)
		}
	}
	// The secret is copied: changing the caller's slice does not matter.
	key := testSecret()
	v, err := auth.NewVerifier(key, auth.WithClock(fixedClock(t0())))
	if err != nil {
		t.Fatal(err)
	}
	for i := range key {
		key[i] = 'x'
	}
	if _, err := v.Verify(context.Background(), "Bearer "+mint(t, "u1", time.Hour, t0())); err != nil {
		t.Fatalf("verifier changed with the caller's slice: %v", err)
	}
}

func TestNilOptionIsRefused(t *testing.T) {
	_, err := auth.NewVerifier(testSecret(), nil)
	if !errors.Is(err, auth.ErrInvalidArgument) || !strings.Contains(err.Error(), "option 0 is nil") {
		t.Errorf("NewVerifier(secret, nil) err = %v, want ErrInvalidArgument naming option 0", err)
	}
	_, err = auth.Mint(testSecret(), "u1", time.Hour, auth.WithIssuer("iss"), nil)
	if !errors.Is(err, auth.ErrInvalidArgument) || !strings.Contains(err.Error(), "option 1 is nil") {
		t.Errorf("Mint(..., WithIssuer, nil) err = %v, want ErrInvalidArgument naming option 1", err)
	}
}

func TestMint(t *testing.T) {
	if _, err := auth.Mint([]byte("short"), "u1", time.Hour); !errors.Is(err, auth.ErrWeakSecret) {
		t.Errorf("short secret: %v", err)
	}
	for _, user := range []string{"", "u 1", strings.Repeat("u", auth.MaxSubjectLen+1), "u\n"} {
		if _, err := auth.Mint(testSecret(), user, time.Hour); !errors.Is(err, auth.ErrInvalidArgument) {
			t.Errorf("Mint(user %q) err = %v, want ErrInvalidArgument", user, err)
		}
	}
	for _, ttl := range []time.Duration{0, -time.Second} {
		if _, err := auth.Mint(testSecret(), "u1", ttl); !errors.Is(err, auth.ErrInvalidArgument) {
			t.Errorf("Mint(ttl %v) err = %v, want ErrInvalidArgument", ttl, err)
		}
	}
	tok := mint(t, "u1001", 90*time.Second, t0())
	var claims jwt.RegisteredClaims
	parsed, err := jwt.ParseWithClaims(tok, &claims, func(*jwt.Token) (any, error) { return testSecret(), nil },
		jwt.WithTimeFunc(fixedClock(t0())))
	if err != nil {
		t.Fatal(err)
	}
	if parsed.Method.Alg() != "HS256" || claims.Subject != "u1001" ||
		!claims.ExpiresAt.Time.Equal(t0().Add(90*time.Second)) || !claims.IssuedAt.Time.Equal(t0()) {
		t.Fatalf("minted token has alg %s claims %+v", parsed.Method.Alg(), claims)
	}
	// The default clock is the real one.
	v, _ := auth.NewVerifier(testSecret())
	real, err := auth.Mint(testSecret(), "u2", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if user, err := v.Verify(context.Background(), "Bearer "+real); err != nil || user != "u2" {
		t.Fatalf("fresh token with real clock: %q, %v", user, err)
	}
}

func TestParseBearer(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		err      error
	}{
		{"Bearer abc.def.ghi", "abc.def.ghi", nil},
		{"bEaReR a-b_c", "a-b_c", nil},
		{"", "", auth.ErrMissingToken},
		{"Bear", "", auth.ErrInvalidToken},
		{"Bearer", "", auth.ErrInvalidToken},
		{"Bearer ", "", auth.ErrInvalidToken},
		{"Bearer a b", "", auth.ErrInvalidToken},
		{"Bearer a+b/c", "", auth.ErrInvalidToken},
		{"Bearer é", "", auth.ErrInvalidToken},
		{"Bearerx abc", "", auth.ErrInvalidToken},
	} {
		got, err := auth.ParseBearer(tc.in)
		if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("ParseBearer(%q) = %q, %v; want %q, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// A secret shorter than the HS256 key size is refused; issuer and audience
// are checked when configured; a token that expires further away than the
// maximum lifetime is refused.
func TestSecretIssuerAudienceLifetime(t *testing.T) {
	ctx := context.Background()
	if _, err := auth.NewVerifier([]byte("sixteen-bytes-16")); !errors.Is(err, auth.ErrWeakSecret) {
		t.Fatalf("16-byte secret: %v", err)
	}
	if _, err := auth.NewVerifier([]byte("thirty-one-bytes-of-secret-xxxx")); !errors.Is(err, auth.ErrWeakSecret) {
		t.Fatalf("31-byte secret: %v", err)
	}
	at := fixedClock(t0())
	minted := func(opts ...auth.Option) string {
		t.Helper()
		tok, err := auth.Mint(testSecret(), "u1", time.Hour, append([]auth.Option{auth.WithClock(at)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + tok
	}
	v := newVerifier(t, auth.WithIssuer("https://id.example"), auth.WithAudience("orders"))
	if _, err := v.Verify(ctx, minted(auth.WithIssuer("https://id.example"), auth.WithAudience("orders"))); err != nil {
		t.Fatalf("matching iss and aud: %v", err)
	}
	for name, tok := range map[string]string{
		"no iss":    minted(auth.WithAudience("orders")),
		"other iss": minted(auth.WithIssuer("https://evil.example"), auth.WithAudience("orders")),
		"no aud":    minted(auth.WithIssuer("https://id.example")),
		"other aud": minted(auth.WithIssuer("https://id.example"), auth.WithAudience("billing")),
	} {
		if _, err := v.Verify(ctx, tok); !errors.Is(err, auth.ErrInvalidToken) {
			t.Errorf("%s: %v, want ErrInvalidToken", name, err)
		}
	}
	// Without the options, iss and aud are not looked at.
	if _, err := newVerifier(t).Verify(ctx, minted(auth.WithIssuer("anyone"))); err != nil {
		t.Fatalf("iss not configured: %v", err)
	}
	// Lifetime: a year-long token is refused by default, a short one not.
	long, err := auth.Mint(testSecret(), "u1", 365*24*time.Hour, auth.WithClock(at))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newVerifier(t).Verify(ctx, "Bearer "+long); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("a year-long token: %v", err)
	}
	if _, err := newVerifier(t, auth.WithMaxLifetime(30*time.Minute)).Verify(ctx, minted()); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("a 1h token against a 30m cap: %v", err)
	}
	for _, bad := range []auth.Option{auth.WithIssuer(""), auth.WithAudience(""), auth.WithMaxLifetime(0)} {
		if _, err := auth.NewVerifier(testSecret(), bad); !errors.Is(err, auth.ErrInvalidArgument) {
			t.Errorf("bad option: %v", err)
		}
	}
}
