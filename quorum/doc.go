// Package quorum is a Redlock locker: it grants a lease on a key when a
// majority of N independent Redis masters agree, and it is meant to be
// embedded in services.
//
//	l, err := quorum.New(clients, quorum.WithTTL(10*time.Second))
//	defer l.Close()
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
// failed that a majority is out of reach. The lease ends at
//
//	start + TTL - (TTL*driftFactor + 2ms)
//
// on the monotonic clock, where start was taken before the first request
// left (so the time the vote took is inside it once), and it is granted only
// while that is still in the future. A failed attempt is undone in the
// background with compare-and-delete (late answers included: a node that
// granted the key after the vote was decided is released as soon as its
// answer arrives), so Lock returns at the verdict; then it retries after a
// full-jitter exponential backoff, within WithRetry, WithMaxWait and the
// context. A Lock that found the key held does not only sleep: every node
// announces a release on a Pub/Sub channel of the key
// (ReleaseChannelPrefix + key), the waiter subscribes to it, and the
// announcement ends its backoff at once; waiters of one Locker are served
// oldest first, and the backoff stays as the fallback for a lost message
// or a holder that does not announce (redsync). A cancelled context
// returns an error wrapping the context's error. The acquire script answers "ours" when the key already holds the
// token, so a client that retried it after a lost answer counts the vote.
//
// Extend runs compare-and-pexpire on every node and succeeds only if a
// majority confirms before the current validity ends; Unlock runs
// compare-and-delete on every node, never touches another owner's value, and
// may be retried. Any operation whose outcome is unclear only ever moves
// Until earlier: an extension that timed out, failed on too many nodes or
// whose context ended may still have been applied, so the lease then ends no
// later than what the new TTL would give (ErrExtendUnconfirmed); a majority
// that answered that the token is gone ends it (ErrLeaseLost). The keys are
// used verbatim with the token as the plain value, so other Redlock clients
// on the same nodes and keys (such as redsync) exclude and are excluded by
// this package.
//
// Unlock returns as soon as a majority confirmed the release (the key is
// then free for the next owner); the other nodes are released in the
// background, and Close waits for them. One fan-out (fanout.go) serves
// every operation, and one worker per node (worker.go) sends that node's
// requests in order: a request leaves only after the node's earlier ones
// returned, so a release never overtakes the same lease's late SET, and
// the requests of concurrent callers that arrive while a batch is out
// leave together as one pipeline.
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
// The fence is taken after the vote, with the lease's validity as its
// deadline; if the Fencer answers after the validity ran out, the lease is
// released and the attempt counts as failed.
//
// # Persistence and the restart guard
//
// A node that crashes and comes back without the keys it held can vote a
// second time for a key that a majority (counting its earlier vote) already
// granted. What it forgets depends on its persistence: everything without
// any, the last second with appendfsync everysec, everything since the
// snapshot with RDB. Redlock's answer is the delayed restart: a restarted
// node must not vote until the longest TTL has passed, by which time every
// lease it granted before has expired.
//
// The restart guard (WithAmnesiaGuard, on by default) enforces it from the
// client. The acquire script reads the node's uptime (INFO server) and votes
// only once the node has been up for the restart window (WithAmnesiaWindow,
// default the TTL) on its own clock (Redis derives the uptime from its wall
// clock: a clock stepped forward after a restart shortens the wait, which is
// one more reason never to step the nodes' clocks); otherwise it answers "warming"
// (ErrNodeWarming) and writes nothing. The check is read atomically with the
// vote and costs no extra round trip. Nodes that have been up longer than
// the window vote at once, on first contact too. Two things let a young
// node vote:
//
//   - TrustNode: an operator vouches for the running process, which writes
//     its run_id into the marker key (BootMarkerKey). A restart changes the
//     run_id, so the trust never carries over to a process that came back
//     from an old snapshot. Use it on brand-new nodes.
//   - WithDurableNodes: the operator declares appendonly yes with
//     appendfsync always. A node with its AOF on whose marker survived the
//     restart kept every acknowledged write and votes at once; one that came
//     back empty has no marker and waits. (Durable nodes get their marker the
//     first time they vote past the window.)
//
// The guard does not cover a node that forgets keys while it keeps running
// (an operator's FLUSHALL, an evicted key: use maxmemory-policy noeviction),
// nor clients that do not run it: redsync on the same keys ignores it, so a
// fleet that mixes the two needs appendfsync always on every node.
//
// # Observability
//
// An Observer (WithObserver) receives every acquisition (duration, attempts,
// result), node error, extension, release (with the count of nodes that
// answered "not owner") and lost lease. Package quorumprom adapts it to
// Prometheus; this package depends only on go-redis and the standard
// library.
package quorum
