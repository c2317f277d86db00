// Package quorum is a Redlock locker, meant to be embedded in services: it
// grants a lease on a key when a majority of N independent Redis masters agree.
//
//	l, err := quorum.New(clients, quorum.WithTTL(10*time.Second))
//	defer l.Close()
//	le, err := l.Lock(ctx, "stock:42") // a lease.Lease, whose dynamic type is *Lease
//	if err != nil { ... }
//	defer le.Unlock(context.WithoutCancel(ctx))
//	// act before le.Until(), with le.Fence() on every write
//
// Or let Do hold the lease while a function runs, extending it in the
// background and cancelling the function's context if it is lost:
//
//	err := l.Do(ctx, "stock:42", func(ctx context.Context, le lease.Lease) error { ... })
//
// An attempt sends SET key token NX PX ttl (in a Lua script) to all nodes
// at once and returns as soon as a majority (N/2+1) granted the key or can
// no longer; the lease ends at start + TTL - (TTL*driftFactor + 2ms) on the
// monotonic clock. Lock retries after a full-jitter backoff, or sooner when
// the nodes announce the key's release. Unlock hands the key over to the
// oldest Lock call of the same Locker waiting for it, in the same script
// call (the key goes from one token to the next with no gap, and the next
// holder needs no vote of its own). Keys and tokens are used verbatim,
// so other Redlock clients (redsync) on the same keys exclude and are excluded.
//
// While a lease is valid no other Redlock client holds its key, provided
// holder pauses stay shorter than the validity left, clocks drift less than
// the drift factor and are never stepped, and nodes do not forget keys (see
// WithAmnesiaGuard). No lock stops a holder that wakes after its lease
// expired: protect the resource with a fence (WithFencer). The repository
// README states the assumptions in full, with the runs that test them.
//
// Locker implements lease.Locker, the API that package etcdlock implements
// too: its sentinel errors (lease.ErrNotAcquired, ...), Observer and Fencer
// are declared in package lease; quorum adds only what is its own
// (QuorumError, NodeError, Op, ErrNodeWarming, ErrNodeTimeout, TrustNode).
//
// A lease.Observer (WithObserver) hears every acquisition, node error,
// extension, release and lost lease; package quorumprom adapts it to
// Prometheus.
package quorum
