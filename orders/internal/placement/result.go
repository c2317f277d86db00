package placement

import (
	"time"

	"github.com/quorumlock/quorumlock/orders/internal/answer"
	"github.com/quorumlock/quorumlock/orders/request"
	"github.com/quorumlock/quorumlock/orders/store"
)

// Result is what placing one order came to: its answer, what the answer
// means for the idempotency record, and what the placement did.
type Result struct {
	Answer  answer.Answer
	Verdict answer.Verdict
	Log     Log
}

// Log is what one placement did, for the request's log line.
type Log struct {
	Result   string        // the orders_place_total label
	Attempts int           // transactions tried (a stale fence retries)
	Batch    int           // orders in the transaction
	Queued   time.Duration // how long the request waited for its turn
	Fallback string        // set when the lock could not be had: db or reject
	SoldOut  bool          // answered from the sold-out report, without the lock
	Lock     *LockLog      // the lease the transaction ran under, if any
}

// LockLog is a lease as the log shows it: never its token.
type LockLog struct {
	Key         string        // the key, or a multi-key lease's keys joined by commas
	TokenDigest string        // names the token, not the token
	Fence       int64         // the first key's fence
	Acquire     time.Duration // how long Lock took, won or not
	Remaining   time.Duration // validity left when the release began
	Unlock      string        // released, unconfirmed, lost, error
}

// Order is one request to place: who asks, under which key, and the id a
// new order gets, and its lines (one for a single-product order).
type Order struct {
	Req   store.OrderRequest
	Lines []request.Line
}
