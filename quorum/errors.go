package quorum

import (
	"errors"
	"fmt"
	"strings"
)

// Errors of a single node, found in a QuorumError's Nodes. The sentinels that
// every locker shares (lease.ErrNotAcquired, lease.ErrLeaseLost, ...) are declared in
// package lease.
var (
	// ErrNodeWarming is the error of a node that may not vote yet after a
	// restart (see WithAmnesiaGuard).
	ErrNodeWarming = errors.New("quorum: node is warming up after a restart")

	// ErrNodeTimeout is the error of a node that did not answer within the
	// node timeout; context.DeadlineExceeded is kept for the caller's context.
	ErrNodeTimeout = errors.New("quorum: node did not answer in time")
)

// NodeError is the failure of one node in one operation.
type NodeError struct {
	Node int    // index of the node in the slice given to New
	Addr string // the node's address when known (a *redis.Client), else ""
	Err  error  // what went wrong: a network error, a timeout, ErrNodeWarming, ...
}

// Error implements error.
func (e NodeError) Error() string {
	if e.Addr != "" {
		return fmt.Sprintf("node %d (%s): %v", e.Node, e.Addr, e.Err)
	}
	return fmt.Sprintf("node %d: %v", e.Node, e.Err)
}

// Unwrap returns the underlying error.
func (e NodeError) Unwrap() error { return e.Err }

// Op names the operation of a QuorumError or a node event.
type Op uint8

// The operations.
const (
	OpAcquire Op = iota + 1
	OpExtend
	OpRelease
	// OpRead reads the nodes without writing a lease: a semaphore's look
	// at its free permits, its permit count check.
	OpRead
)

// String returns "acquire", "extend", "release" or "read".
func (o Op) String() string { return name(o, "acquire", "extend", "release", "read") }

// QuorumError describes an operation that did not get what it needed from the
// nodes. errors.Is matches its sentinel (lease.ErrNotAcquired,
// lease.ErrQuorumUnavailable, lease.ErrLeaseLost, lease.ErrExtendUnconfirmed,
// lease.ErrUnlockUnconfirmed) and each of Nodes.
type QuorumError struct {
	Op        Op          // the operation
	Key       string      // the lock key
	N         int         // number of nodes
	Quorum    int         // confirmations needed (N/2+1)
	Confirmed int         // nodes that confirmed (granted, extended or released)
	Held      int         // nodes that answered that another owner holds the key
	Nodes     []NodeError // nodes that failed, timed out or were warming up
	Reason    string      // extra explanation, may be empty
	Err       error       // the sentinel
}

// Error implements error.
func (e *QuorumError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: %s %q: %d of %d nodes confirmed, %d needed", e.Err, e.Op, e.Key, e.Confirmed, e.N, e.Quorum)
	if e.Held > 0 {
		fmt.Fprintf(&b, ", %d held by another owner", e.Held)
	}
	if e.Reason != "" {
		b.WriteString(", " + e.Reason)
	}
	sep := ": "
	for _, ne := range e.Nodes {
		b.WriteString(sep + ne.Error())
		sep = "; "
	}
	return b.String()
}

// Unwrap returns the sentinel followed by each node error.
func (e *QuorumError) Unwrap() []error {
	errs := append(make([]error, 0, 1+len(e.Nodes)), e.Err)
	for _, ne := range e.Nodes {
		errs = append(errs, ne)
	}
	return errs
}

// name returns names[v-1], or "unknown" when v is out of range.
func name[T ~uint8](v T, names ...string) string {
	if v == 0 || int(v) > len(names) {
		return "unknown"
	}
	return names[v-1]
}
