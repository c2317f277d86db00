package placement

import (
	"time"

	"github.com/quorumlock/quorumlock/orders/answer"
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

// unplaced is the 503 of a request that wrote nothing.
func (p *Placer) unplaced(result, detail string) Result {
	p.Metrics.Place(result)
	return Result{Answer: answer.Answer{Kind: answer.Unavailable, Detail: detail, Wait: p.Retry},
		Verdict: answer.Retryable, Log: Log{Result: result}}
}

// allFail gives every ticket of batch the answer a that nothing was
// written, with log.
func (p *Placer) allFail(batch []*ticket, log Log, a answer.Answer) []Result {
	out := make([]Result, len(batch))
	for i, t := range batch {
		l := log
		l.Queued = time.Since(t.joined)
		p.Metrics.Place(l.Result)
		out[i] = Result{Answer: a, Verdict: answer.Retryable, Log: l}
	}
	return out
}
