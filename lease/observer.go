package lease

import "time"

// Result is the outcome of an acquisition (Lock, TryLock or Do).
type Result uint8

// The results.
const (
	ResultAcquired    Result = iota + 1 // a lease was returned
	ResultNotAcquired                   // held by another owner (ErrNotAcquired)
	ResultUnavailable                   // the backend could not decide (ErrQuorumUnavailable)
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
	Wakeups  int           // waits ended early by news of the key's release
	Duration time.Duration // from the call to its return
	Result   Result
	Err      error // nil when Result is ResultAcquired
}

// NodeEvent reports one call to one server of the backend that failed (for
// quorum, one Redis node's request). A backend that talks to one endpoint
// through a client that fails over by itself (etcdlock) may never send it.
type NodeEvent struct {
	Op   string // the operation: "acquire", "extend" or "release"
	Key  string
	Node int    // the server's index in the backend's configuration
	Addr string // the server's address when known, else ""
	Err  error
}

// ExtendEvent reports one Extend call that reached the backend.
type ExtendEvent struct {
	Key       string
	Duration  time.Duration
	Confirmed int   // servers that confirmed the extension
	Err       error // nil on success
}

// ReleaseEvent reports one Unlock or failed attempt's release, counting each
// server (quorum: node; etcdlock: key) once, after the last request ended.
type ReleaseEvent struct {
	Key      string
	Duration time.Duration // how long the release waited for confirmation
	Released int           // where the key held the token and was deleted
	NotOwner int           // where the key was absent or held by another owner
	Failed   int           // where no answer came in time
}

// LostReason says why a lease was lost.
type LostReason uint8

// The reasons.
const (
	LostExpired      LostReason = iota + 1 // validity ran out before an extension
	LostExtendFailed                       // an extension found the lease gone, or ran out of validity
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
// return quickly. An Observer that blocks stalls the Locker's requests, and
// one that calls back into the Locker (Lock, Unlock, Close) can deadlock it.
// Embed NopObserver to implement only some methods.
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
