// Package store is the Postgres side of the orders service: the schema, the
// one transaction behind POST /orders, the order state machine and the
// payment records.
//
// Postgres is the source of truth. Redis idempotency records and the quorum
// lock only make the common case fast and quiet; every guarantee below holds
// without them.
//
// # Placing an order
//
// An order is a cart of one line per product; a single-product order is a
// one-line cart. [Store.PlaceCarts] places a batch of carts in one
// transaction, under the fences it is given:
//
//  1. It serializes requests with the same (user, idempotency key) on a
//     transaction-scoped advisory lock, then looks for a saved outcome for
//     each pair: an order, or a saved rejection such as out of stock. If
//     there is one, the request is a replay: the same fingerprint returns
//     the saved response snapshot, a different one returns
//     [ErrFingerprintMismatch]. Nothing is written for it.
//  2. It takes each product's fence and locks its stock row, in product
//     order. A stale fence returns [ErrStaleFence]; an unknown product
//     returns [ErrUnknownProduct]; both write nothing.
//  3. A cart that the stock cannot cover saves a request_outcomes row
//     holding the caller's out-of-stock snapshot and gets [ErrOutOfStock]
//     with it, so the rejection replays like a success.
//  4. The other carts take their units with one fenced conditional
//     decrement per product (available >= units AND last_fence < fence,
//     through the fencing package), and their orders and lines are
//     inserted (status CREATED, under the caller's order ids) with the
//     caller's created snapshots, in the same transaction.
//
// The store renders nothing and knows no HTTP: the caller hands it the
// order ids and a renderer of snapshots (status and body), and the store
// saves whichever the transaction's outcome calls for.
//
// UNIQUE(user_id, idempotency_key) backs step 1: should a twin commit the
// same pair anyway, the insert fails, the transaction rolls back (returning
// the stock) and the original is read back and compared by fingerprint.
//
// # State machine
//
//	CREATED -> PAYING -> PAID
//	                  -> PAYMENT_FAILED
//	CREATED -> CANCELLED (returns the quantity to stock)
//
// Every move is a conditional UPDATE on the current status. When it changes
// no row, the current state decides the answer: asking for the state the
// order is already in succeeds without doing anything (PAID stays PAID, a
// second cancel does not restock again), any other move returns
// [ErrInvalidTransition] with the current state. CANCELLED is never revived
// and PAID is never cancelled.
//
// # Payments
//
// [Store.BeginPayment] moves an order to PAYING and records a PENDING
// payment under a stable payment request id in one transaction;
// [Store.SettlePayment] records the provider's final answer and moves the
// order to PAID or PAYMENT_FAILED in one transaction; [Store.PendingPayments]
// lists payments for a reconciler. The payment package drives them.
//
// # Schema
//
// [Migrate] applies the embedded goose migrations (tables product_stock,
// orders, request_outcomes, payments and fence_counters, and sync_marks,
// the row [AwaitDurable] writes). It is idempotent
// and safe to run from several processes at once.
package store
