// Package orders is the order service: an idempotent POST /orders that
// shows the whole chain of defences, plus reading, paying and cancelling an
// order. It assembles the service's layers from its options; a request
// goes down through them and its answer comes back up:
//
//	transport  (orders/transport)  handler: auth, parse, validate; renders every answer
//	-> create  (orders/create)     fingerprint, idempotency claim (orders/idem)
//	   [replay | 202 in progress | 409 mismatch | proceed]; settles the claim
//	-> placement (orders/placement) the order is a cart (a single-product
//	   order is a one-line cart), queued on this instance with a Locker and
//	   placed in a batch across products, one product in one batch at a time:
//	   [sold out moments ago: the 409s saved in one write, no lock]
//	   a batch of contended products: the stock lock, once, on all of them;
//	   a batch of quiet ones: no lock (WithLockRule), Postgres arbitrates
//	-> store   (orders/store)      one transaction for the batch (PlaceCarts):
//	   fences taken, fenced conditional decrements, orders under
//	   UNIQUE(user_id, idempotency_key), response snapshots
//	-> unlock -> each request gets its own answer, which completes its claim
//
// The Redis claim is a fast path. Postgres is the source of truth: when the
// claim is gone or Redis is down, the transaction still finds the saved
// outcome of (user, key); when the lock quorum is lost, the fence and the
// conditional decrement still arbitrate (FallbackDB), or the service
// answers 503 (FallbackReject). No constraint is ever bypassed.
//
// The service takes its lock through the one lease API (package lease):
// WithLocker takes a lease.Locker, a *quorum.Locker or an *etcdlock.Locker
// alike, with no adapter. Without a Locker, every request runs its own
// transaction and Postgres arbitrates alone.
package orders
