package quorum_test

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/quorum"
)

func TestTokenDigest(t *testing.T) {
	a, b := quorum.TokenDigest("token-a"), quorum.TokenDigest("token-b")
	if len(a) != 8 {
		t.Fatalf("digest %q: want 8 hex digits", a)
	}
	if _, err := hex.DecodeString(a); err != nil {
		t.Fatalf("digest %q is not hex: %v", a, err)
	}
	if a == b {
		t.Fatalf("two tokens share the digest %q", a)
	}
	if quorum.TokenDigest("token-a") != a {
		t.Fatal("the digest is not deterministic")
	}
}

// A lease logged through slog or fmt shows its key, digest and fence, and
// never its token.
func TestLeaseLogsNoToken(t *testing.T) {
	r := newRig(t)
	l := r.locker(t, quorum.WithTTL(time.Minute))
	k := key(t)
	lease, err := l.Lock(ctxT(t, 30*time.Second), k)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lease.Unlock(ctxT(t, 10*time.Second)) }()

	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	log.Info("held", "lease", lease)
	slog.New(slog.NewTextHandler(&buf, nil)).Info("held", "lease", lease)
	fmt.Fprintf(&buf, "%v %s\n", lease, lease)
	out := buf.String()
	if strings.Contains(out, lease.Token()) {
		t.Fatalf("the token appears in the log:\n%s", out)
	}
	for _, want := range []string{k, lease.TokenDigest(), `"valid_for":`} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %q:\n%s", want, out)
		}
	}
	if lease.TokenDigest() != quorum.TokenDigest(lease.Token()) {
		t.Error("Lease.TokenDigest differs from TokenDigest(Token())")
	}
}
