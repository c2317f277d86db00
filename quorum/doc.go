// Package quorum is a Redlock locker: it grants a lease on a key when a
// majority of N independent Redis masters agree, and it is meant to be
// embedded in services.
//
//	l, err := quorum.New(clients, quorum.WithTTL(10*time.Second))
//	lease, err := l.Lock(ctx, "stock:42")
//	if err != nil { ... }
//	defer lease.Unlock(context.WithoutCancel(ctx))
//	// act before lease.Until(), with lease.Fence() on every write
//
// Or let Do hold the lease for the duration of a function, extending it in
// the background and cancelling the function's context if it is lost:
//
//	err := l.Do(ctx, "stock:42", func(ctx context.Context, lease *quorum.Lease) error { ... })
//
// # The algorithm
//
// An acquisition draws a token of at least 128 random bits and sends
// SET key token NX PX ttl (one Lua script, run with EVALSHA) to all N nodes
// at once, every request under the node timeout. It returns as soon as a
// majority (N/2+1) granted the key, or as soon as so many nodes refused or
// failed that a majority is out of reach. The validity of the lease is
//
//	TTL - elapsed - (TTL*driftFactor + 2ms)
//
// on the monotonic clock, where elapsed runs from before the first request
// left. If it is not positive the acquisition failed. A failed attempt is
// undone on every node with compare-and-delete (late answers included: a
// node that granted the key after the vote was decided is released as soon
// as its answer arrives), then Lock retries after a full-jitter exponential
// backoff, within WithRetry, WithMaxWait and the context. A cancelled
// context returns an error wrapping the context's error.
//
// Extend runs compare-and-pexpire on every node and succeeds only if a
// majority confirms before the current validity ends; Unlock runs
// compare-and-delete on every node, never touches another owner's value, and
// may be retried. The keys are used verbatim with the token as the plain
// value, so other Redlock clients on the same nodes and keys (such as
// redsync) exclude and are excluded by this package.
//
// N should be odd: 2f+1 nodes tolerate f failed nodes, and an even N
// tolerates no more than N-1 would. The nodes must be independent masters:
// a replica promoted after a failover may not have the latest lock keys.
//
// # What it guarantees, and under which assumptions
//
// While a lease is valid (time.Now() before Until) no other client of a
// Redlock-compatible locker holds a valid lease on the same key, provided:
//
//   - Pauses are bounded: the holder's process is not stopped (GC, page
//     faults, VM or container freeze, SIGSTOP) for longer than its remaining
//     validity at the moment it checks Until and then acts.
//   - Clocks drift little: every node's clock and this process's monotonic
//     clock run at rates within the drift factor of each other (1% by
//     default), so a key's PX on a node does not end before Until here.
//   - Clocks do not jump on the nodes: Redis expires keys by its wall clock,
//     so a node whose clock is stepped forward (an NTP step, an operator)
//     drops keys early. Slew the clocks, never step them.
//   - Nodes do not forget: a node that restarts without the lock keys it
//     held could grant the same key again. See Persistence below.
//
// # Why fencing is still needed
//
// The first two assumptions can fail in practice. A holder checks Until,
// then pauses for a long GC, or its network to the resource is slow; the
// lease expires, another client acquires the key and writes; then the first
// holder wakes up and writes too. No lock service can prevent this, because
// the late write happens after the lock was lawfully granted to someone
// else; only the protected resource can reject it. Configure a Fencer
// (WithFencer): every lease then carries Fence, a number that strictly
// increases per key, and the resource must accept a write only if its fence
// is higher than the last one it saw (for a database, a conditional UPDATE
// ... WHERE last_fence < $fence). With fencing, the lock keeps contention
// low and the fence keeps the data correct; without it, the lock is an
// efficiency measure that is correct only while the timing assumptions hold.
// The fence is taken after the vote; if the Fencer answers after the
// validity ran out, the lease is released and the attempt counts as failed.
//
// # Persistence and the amnesia guard
//
// A node that crashes and comes back without the keys it held can vote a
// second time for a key that a majority (counting its earlier vote) already
// granted. There are two safe ways to run the nodes:
//
//   - Persist every write before acknowledging it: appendonly yes with
//     appendfsync always. A restarted node then remembers its keys, and the
//     amnesia guard may be turned off (WithAmnesiaGuard(false)).
//   - Delay the restart: a restarted node must not vote for one maximum TTL.
//     The amnesia guard, on by default, does this from the client side. Each
//     node holds a marker key (BootMarkerKey) stamped with the node's own
//     TIME the first time a client finds it missing. A node that lost its
//     data lost its marker too; the acquire script re-stamps it and answers
//     "warming" (ErrNodeWarming) instead of voting until the amnesia window
//     (WithAmnesiaWindow, default the TTL) has passed on the node's own
//     clock. The check costs no extra round trip: it runs in the same
//     script as the SET, so an acquisition is still one request per node.
//
// The guard detects a node that came back empty (no persistence, or lost
// files). It cannot detect a node that restarted from an older snapshot
// (RDB, or AOF with appendfsync everysec): its marker is old, but the keys
// written after the snapshot are gone. So run the nodes either with
// appendfsync always, or with no persistence at all (save "" and appendonly
// no) and the guard on; snapshot-only persistence is the unsafe middle. Use
// maxmemory-policy noeviction: an evicted lock key is a forgotten vote, and
// an evicted marker makes the node warm up again.
//
// The guard also makes a brand-new set of nodes wait one window before the
// first lease can be granted, since an empty node looks the same as a
// restarted one. An operator who knows a node never held a lock may run
// SET quorumlock:boot 0 on it to let it vote at once.
//
// # Observability
//
// An Observer (WithObserver) receives every acquisition (duration, attempts,
// result), node error, extension, release (with the count of nodes that
// answered "not owner") and lost lease. Package quorumprom adapts it to
// Prometheus; this package depends only on go-redis and the standard
// library.
package quorum
