package lease

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// Locker grants leases on keys. Keys are used verbatim.
type Locker interface {
	// Lock acquires key, waiting (up to the backend's maximum wait) while
	// another owner holds it.
	Lock(ctx context.Context, key string) (Lease, error)
	// TryLock makes one attempt: ErrNotAcquired when key is held.
	TryLock(ctx context.Context, key string) (Lease, error)
	// LockMulti acquires every key, all or nothing, waiting like Lock.
	LockMulti(ctx context.Context, keys ...string) (Lease, error)
	// TryLockMulti makes one attempt at every key, all or nothing.
	TryLockMulti(ctx context.Context, keys ...string) (Lease, error)
	// Do acquires key like Lock, runs fn while the lease is kept alive, then
	// releases it. See the package documentation for its guarantees.
	Do(ctx context.Context, key string, fn func(ctx context.Context, l Lease) error) error
	// DoMulti is Do on a multi-key lease.
	DoMulti(ctx context.Context, keys []string, fn func(ctx context.Context, l Lease) error) error
	// Close releases the Locker's resources; later calls fail with ErrClosed.
	// What happens to leases still held differs by backend: quorum leaves
	// their keys on the nodes until their validity runs out, etcdlock
	// revokes its session, which ends them at once. Unlock what you hold
	// first.
	Close() error
}

// Lease is a held lock: the right to act on its keys until Until.
type Lease interface {
	// Key returns the locked key (of a multi-key lease, the first in order).
	Key() string
	// Keys returns the locked keys, sorted.
	Keys() []string
	// Token returns the lease's owner token: a secret on quorum (who knows
	// it can release the lock); on etcdlock the owner key, which anyone who
	// may list the keys can read. Log TokenDigest(Token()) instead.
	Token() string
	// Fence returns Key's fence token (0 without a Fencer).
	Fence() int64
	// FenceOf returns key's fence token; 0 without a Fencer or for a key the
	// lease does not hold.
	FenceOf(key string) int64
	// Until returns the end of the validity, on the monotonic clock.
	Until() time.Time
	// Lost returns a channel closed when the lease ends.
	Lost() <-chan struct{}
	// Err returns nil while the lease is held, then an error matching
	// ErrLeaseLost or ErrReleased.
	Err() error
	// Extend moves the validity to about ttl from now: an error matching
	// ErrLeaseLost when the lease is gone, ErrExtendUnconfirmed when the
	// outcome is unclear (Until may then only have moved earlier). A backend
	// may accept only its Locker's TTL (etcdlock).
	Extend(ctx context.Context, ttl time.Duration) error
	// Unlock releases the lease: an error matching ErrLeaseLost when the
	// lease had already been lost, ErrUnlockUnconfirmed when the release was
	// not confirmed in time.
	Unlock(ctx context.Context) error
}

// TokenDigest returns the first 8 hex digits of a token's SHA-256: it names a
// lease in logs and tools (quorumctl) without revealing the token, which lets
// its reader release or extend the lease. It tells apart one key's few leases.
func TokenDigest(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:4])
}
