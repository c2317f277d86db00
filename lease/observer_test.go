package lease_test

import (
	"testing"

	"github.com/quorumlock/quorumlock/lease"
)

// The names are metric labels (quorumprom): they must not change.
func TestNames(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{lease.ResultAcquired.String(), "acquired"},
		{lease.ResultNotAcquired.String(), "not_acquired"},
		{lease.ResultUnavailable.String(), "unavailable"},
		{lease.ResultCanceled.String(), "canceled"},
		{lease.ResultError.String(), "error"},
		{lease.Result(0).String(), "unknown"},
		{lease.Result(6).String(), "unknown"},
		{lease.LostExpired.String(), "expired"},
		{lease.LostExtendFailed.String(), "extend_failed"},
		{lease.LostReason(3).String(), "unknown"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// A digest is short, stable and does not contain the token.
func TestTokenDigest(t *testing.T) {
	a, b := lease.TokenDigest("token-a"), lease.TokenDigest("token-b")
	if len(a) != 8 || a == b || a != lease.TokenDigest("token-a") {
		t.Fatalf("digests %q and %q: want 8 stable hex digits that tell tokens apart", a, b)
	}
}
