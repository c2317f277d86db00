package quorum

import (
	"context"
	"time"
)

// Fencer issues fence tokens: for each key, every call returns a number
// strictly greater than any it returned before for that key, even across
// restarts; or, reserving, the key's next token, which the write itself takes
// so that at most one write commits each (fencing.Reserver). With WithFencer
// every lease carries one in Fence; the resource must reject a write whose fence
// is not above the last it saw, making a late holder harmless (the lock cannot).
type Fencer interface {
	Next(ctx context.Context, key string) (int64, error)
}

// Result is the outcome of an acquisition (Lock, TryLock or Do).
type Result uint8

// The results.
const (
	ResultAcquired    Result = iota + 1 // a lease was returned
	ResultNotAcquired                   // held by another owner (ErrNotAcquired)
	ResultUnavailable                   // no majority reachable (ErrQuorumUnavailable)
	ResultCanceled                      // the context ended first
	ResultError                         // anything else, e.g. the Fencer failed
)

// String returns a short lower-case name, fit for a metric label.
func (r Result) String() string {
	return name(r, "acquired", "not_acquired", "unavailable", "canceled", "error")
}

// name returns names[v-1], or "unknown" when v is out of range.
func name[T ~uint8](v T, names ...string) string {
	if v == 0 || int(v) > len(names) {
		return "unknown"
	}
	return names[v-1]
}

// AcquireEvent reports one Lock, TryLock or Do acquisition.
type AcquireEvent struct {
	Key      string
	Attempts int           // attempts made, the first included
	Wakeups  int           // waits ended early by a node announcing the key's release
	Duration time.Duration // from the call to its return
	Result   Result
	Err      error // nil when Result is ResultAcquired
}

// NodeEvent reports one failed node request.
type NodeEvent struct {
	Op   Op
	Key  string
	Node int    // index in the slice given to New
	Addr string // address when known
	Err  error
}

// ExtendEvent reports one Extend call that reached the nodes.
type ExtendEvent struct {
	Key       string
	Duration  time.Duration
	Confirmed int   // nodes that confirmed the extension
	Err       error // nil on success
}

// ReleaseEvent reports one Unlock or failed attempt's release, counting each
// node once, after the last request ended (maybe after Unlock, from any goroutine).
type ReleaseEvent struct {
	Key      string
	Duration time.Duration // how long Unlock waited for a majority; for a failed attempt, until every answer came
	Released int           // nodes where the key held the token and was deleted
	NotOwner int           // nodes that answered 0: the key was absent or held by another owner
	Failed   int           // nodes that did not answer in time
}

// LostReason says why a lease was lost.
type LostReason uint8

// The reasons.
const (
	LostExpired      LostReason = iota + 1 // validity ran out before an extension
	LostExtendFailed                       // an extension found the token gone from the nodes, or ran out of validity
)

// String returns "expired" or "extend_failed".
func (r LostReason) String() string { return name(r, "expired", "extend_failed") }

// LostEvent reports a lease lost while held (not one released by Unlock).
type LostEvent struct {
	Key    string
	Reason LostReason
	Held   time.Duration // how long the lease was held
}

// Observer receives events from a Locker, synchronously and possibly from
// several goroutines at once: its methods must be safe for concurrent use and
// return quickly. Node errors and release events come from the node workers:
// an Observer that blocks stalls that node's requests, and one that calls back
// into the Locker (Lock, Unlock, Close) can deadlock it. Embed NopObserver.
type Observer interface {
	ObserveAcquire(AcquireEvent)
	ObserveNodeError(NodeEvent)
	ObserveExtend(ExtendEvent)
	ObserveRelease(ReleaseEvent)
	ObserveLost(LostEvent)
}

// NopObserver ignores every event. It is the default Observer.
type NopObserver struct{}

// ObserveAcquire does nothing.
func (NopObserver) ObserveAcquire(AcquireEvent) {}

// ObserveNodeError does nothing.
func (NopObserver) ObserveNodeError(NodeEvent) {}

// ObserveExtend does nothing.
func (NopObserver) ObserveExtend(ExtendEvent) {}

// ObserveRelease does nothing.
func (NopObserver) ObserveRelease(ReleaseEvent) {}

// ObserveLost does nothing.
func (NopObserver) ObserveLost(LostEvent) {}
