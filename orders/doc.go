// Package orders is the order service: an idempotent POST /orders that
// shows the whole chain of defences, plus reading, paying and cancelling an
// order.
//
// A create request walks this path, each step with one owner:
//
//	handler (auth, parse, validate)            this package, orders/auth, orders/request
//	-> fingerprint                             orders/request
//	-> idempotency claim (Redis script)        orders/idem
//	   [replay | 202 in progress | 409 mismatch | proceed]
//	-> the product's queue on this instance    combine.go (with a Locker)
//	   [sold out moments ago: the 409s saved in one write, no lock]
//	-> the stock lock, once per batch          lock.go (or Postgres alone)
//	-> one transaction for the batch: fence taken, fenced conditional
//	   decrement, orders under UNIQUE(user_id, idempotency_key), response
//	   snapshots                               orders/store (PlaceBatch)
//	-> unlock -> each request completes its claim and answers (render.go)
//
// The Redis claim is a fast path. Postgres is the source of truth: when the
// claim is gone or Redis is down, the transaction still finds the saved
// outcome of (user, key); when the lock quorum is lost, the fence and the
// conditional decrement still arbitrate (FallbackDB), or the service
// answers 503 (FallbackReject). No constraint is ever bypassed.
//
// The service knows a lock only through the Locker interface and its own
// sentinels (ErrLockBusy, ErrLockUnavailable, ...); QuorumLocker adapts a
// quorum.Locker. Without a Locker, every request runs its own transaction
// and Postgres arbitrates alone.
package orders
