// Package lease declares, once, the lease API that every locker of this
// module implements (package quorum on Redis masters, package etcdlock on
// etcd) and every consumer uses: the Locker and Lease interfaces, the
// sentinel errors, the Observer with its events, and the Fencer. It depends
// on the standard library alone, so code written against it links neither
// backend.
//
// An implementation guarantees:
//   - While a Lease is valid (before Until, Err nil), no other holder of the
//     same backend holds any of its keys, under the backend's stated timing
//     assumptions. Until never outlives the backend's own validity; an unclear
//     outcome only ever moves it earlier.
//   - Lost is closed exactly once, when the lease ends: its validity ran out,
//     an extension found it gone, or Unlock was called. Err then matches
//     ErrLeaseLost or ErrReleased.
//   - With a Fencer, each key of a lease carries a fence strictly greater than
//     that of every earlier lease on the key (Fence, FenceOf); without one,
//     they are 0.
//   - Errors match the sentinels below with errors.Is: ErrNotAcquired for
//     contention, ErrQuorumUnavailable when the backend cannot decide,
//     ErrClosed after Close, and so on. A backend may wrap more detail.
//   - Do runs fn only once the lease is held, cancels fn's context with a cause
//     matching ErrLeaseLost as soon as the lease is lost, releases the lease
//     before returning (even when fn panics), and leaves no goroutine behind.
//   - Every method is safe for concurrent use. Observer events are delivered
//     synchronously, possibly from several goroutines.
//
// The concrete lease types (*quorum.Lease, *etcdlock.Lease) are the dynamic
// types of the Lease values returned; a type assertion reaches a backend's
// extras. TokenDigest names a lease in logs without revealing its token.
package lease
