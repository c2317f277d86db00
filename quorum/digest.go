package quorum

import (
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"time"
)

// TokenDigest returns the first 8 hex digits of a token's SHA-256: it names
// a lease in logs and tools (quorumctl prints it for a key's value) without
// revealing the token, which would let its reader release or extend the
// lease. It tells apart the few leases of one key, not all leases.
func TokenDigest(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:4])
}

// TokenDigest returns TokenDigest of the lease's token: safe to log.
func (le *Lease) TokenDigest() string { return TokenDigest(le.token) }

// LogValue makes a lease safe to pass to log/slog: it logs as a group of
// its key, token digest, fence and the validity left, never the token.
func (le *Lease) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.String("key", le.name),
		slog.String("token", le.TokenDigest()),
		slog.Duration("valid_for", max(time.Until(le.Until()), 0)),
	}
	if f := le.Fence(); f != 0 {
		attrs = append(attrs, slog.Int64("fence", f))
	}
	return slog.GroupValue(attrs...)
}

// String describes the lease for humans (fmt's %v): key and token digest,
// never the token.
func (le *Lease) String() string {
	return "lease " + le.name + " token " + le.TokenDigest()
}
