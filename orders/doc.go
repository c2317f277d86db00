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
//	-> lock stock:{product} (quorum), or arbitrate with Postgres alone
//	-> one transaction: fenced conditional stock decrement + order insert
//	   under UNIQUE(user_id, idempotency_key) + response snapshot   orders/store
//	-> idempotency complete (SUCCESS + saved response)
//	-> unlock -> respond
//
// The Redis claim is a fast path. Postgres is the source of truth: when the
// claim is gone or Redis is down, the transaction still finds the saved
// outcome of (user, key); when the lock quorum is lost, the fence and the
// conditional decrement still arbitrate (ORDERS_LOCK_FALLBACK=db), or the
// service answers 503 (reject). No constraint is ever bypassed.
//
// The service depends on the lock through the Locker interface, so tests
// and the degrade path can swap it.
package orders
