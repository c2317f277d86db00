package auth_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/orders/auth"
)

// FuzzParseBearer checks that ParseBearer never panics, that every failure
// wraps exactly one of ErrMissingToken and ErrInvalidToken, and that an
// accepted header is exactly the Bearer scheme, one space and a token of
// base64url characters and dots.
func FuzzParseBearer(f *testing.F) {
	for _, s := range []string{
		"", "Bearer", "Bearer ", "Bearer a.b.c", "bearer a.b.c", "Bearer  a.b.c", " Bearer a",
		"Bearer a b", "Bearer\ta", "Basic Zm9vOmJhcg==", "Bearer a=", "Bearer é", "BEARER x_y-z",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		tok, err := auth.ParseBearer(h)
		if err != nil {
			missing, invalid := errors.Is(err, auth.ErrMissingToken), errors.Is(err, auth.ErrInvalidToken)
			if missing == invalid {
				t.Fatalf("ParseBearer(%q) error %v wraps missing=%v invalid=%v", h, err, missing, invalid)
			}
			if missing != (h == "") {
				t.Fatalf("ParseBearer(%q): ErrMissingToken is only for the empty header, got %v", h, err)
			}
			if tok != "" {
				t.Fatalf("error with token %q", tok)
			}
			return
		}
		if tok == "" || len(tok) > auth.MaxTokenLen {
			t.Fatalf("accepted token of length %d", len(tok))
		}
		if !strings.EqualFold(h[:7], "Bearer ") || h[7:] != tok {
			t.Fatalf("ParseBearer(%q) = %q: not \"Bearer <token>\"", h, tok)
		}
		if strings.Trim(tok, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.") != "" {
			t.Fatalf("token %q has characters outside base64url and '.'", tok)
		}
	})
}

// FuzzVerify checks that Verify never panics and never accepts a header
// whose token is not byte for byte one of the tokens minted with the secret:
// mutations of a genuine token (re-encodings, padding bits, other algorithms)
// must all fail.
func FuzzVerify(f *testing.F) {
	now := t0()
	valid := map[string]string{}
	for _, u := range []string{"u1001", "u:2"} {
		tok := mint(f, u, time.Hour, now)
		valid[tok] = u
		f.Add("Bearer " + tok)
	}
	f.Add("Bearer eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiJ1MSJ9.")
	f.Add("")
	v := newVerifier(f)
	f.Fuzz(func(t *testing.T, h string) {
		user, err := v.Verify(context.Background(), h)
		if err != nil {
			if !errors.Is(err, auth.ErrMissingToken) && !errors.Is(err, auth.ErrInvalidToken) && !errors.Is(err, auth.ErrExpiredToken) {
				t.Fatalf("Verify(%q) error %v wraps no sentinel", h, err)
			}
			return
		}
		tok, _ := auth.ParseBearer(h)
		if want, ok := valid[tok]; !ok || want != user {
			t.Fatalf("Verify accepted a token that was never minted: %q -> %q", h, user)
		}
	})
}
