package quorum_test

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/quorum"
)

func TestTokenDigest(t *testing.T) {
	a, b := lease.TokenDigest("token-a"), lease.TokenDigest("token-b")
	if len(a) != 8 {
		t.Fatalf("digest %q: want 8 hex digits", a)
	}
	if _, err := hex.DecodeString(a); err != nil {
		t.Fatalf("digest %q is not hex: %v", a, err)
	}
	if a == b {
		t.Fatalf("two tokens share the digest %q", a)
	}
	if lease.TokenDigest("token-a") != a {
		t.Fatal("the digest is not deterministic")
	}
}

// A lease logged through slog or fmt shows its key, digest and fence, and
// never its token.
func TestLeaseLogsNoToken(t *testing.T) {
	r := newRig(t)
	l := r.locker(t, quorum.WithTTL(time.Minute))
	k := key(t)
	le, err := l.Lock(ctxT(t, 30*time.Second), k)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = le.Unlock(ctxT(t, 10*time.Second)) }()

	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	log.Info("held", "lease", le)
	slog.New(slog.NewTextHandler(&buf, nil)).Info("held", "lease", le)
	fmt.Fprintf(&buf, "%v %s\n", le, le)
	out := buf.String()
	if strings.Contains(out, le.Token()) {
		t.Fatalf("the token appears in the log:\n%s", out)
	}
	for _, want := range []string{k, lease.TokenDigest(le.Token()), `"valid_for":`} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %q:\n%s", want, out)
		}
	}
	if le.(*quorum.Lease).TokenDigest() != lease.TokenDigest(le.Token()) {
		t.Error("Lease.TokenDigest differs from TokenDigest(Token())")
	}
}
