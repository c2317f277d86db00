// Package failpoint arms crash points in the order and payment flow, for
// failure drills that crash or freeze a real ordersd process at an exact
// place.
//
// A failpoint is a named place in the code (see [Name]) where the flow
// calls [Set.Hit]. A point is armed with an action by the environment
// variable QUORUMLOCK_FAILPOINTS ([EnvVar]), read once by [FromEnv]:
//
//	QUORUMLOCK_FAILPOINTS=after-lock=kill,after-commit=stop
//
// The actions are:
//
//   - kill: the process sends itself SIGKILL. This is a real crash: no
//     deferred function runs, nothing is flushed, no connection is closed
//     politely; the kernel closes the sockets.
//   - stop: the process sends itself SIGSTOP and freezes, as a long GC
//     pause or a frozen container would. Whoever watches it decides when
//     it goes on (SIGCONT) or dies (SIGKILL).
//
// Before it acts, Hit writes the line "failpoint <name> reached" to
// standard error in a single unbuffered write, so a drill can wait for it.
// Each armed point acts on its first Hit only; later Hits of it pass, so a
// process continued after a stop runs on. An action written action@n acts
// on the nth Hit instead ("after-decrement=kill@2": the second batch's
// transaction), the earlier ones passing.
//
// # Production builds cannot arm them
//
// Only a binary built with the failpoints build tag can arm a failpoint:
//
//	go build -tags failpoints ./cmd/ordersd
//
// In every other build the code that kills or stops the process is not
// compiled in: FromEnv ignores the variable (and [Set.Ignored] reports
// that it was set) and Hit does nothing. [Enabled] tells which build this
// is. The failpoints build is for Unix.
//
// The package keeps no package-level state: the Set is handed to the code
// that calls Hit, and a nil *Set is a valid Set with nothing armed.
package failpoint

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// EnvVar is the environment variable FromEnv reads: a comma-separated list
// of name=action.
const EnvVar = "QUORUMLOCK_FAILPOINTS"

// Name is a failpoint: a place in the flow where Hit is called.
type Name string

// The failpoints, in the order a create request and then a payment reach
// them.
const (
	// AfterClaim: the idempotency claim is taken (IN_PROGRESS in Redis),
	// before the stock lock.
	AfterClaim Name = "after-claim"
	// AfterLock: the stock lock and its fence are held, before the order
	// transaction begins.
	AfterLock Name = "after-lock"
	// AfterDecrement: inside the order transaction, the fenced stock
	// decrement is done and the order row not yet inserted.
	AfterDecrement Name = "after-decrement"
	// AfterCommit: the order transaction committed, before the idempotency
	// record is set to SUCCESS.
	AfterCommit Name = "after-commit"
	// AfterSuccess: the idempotency record is settled (SUCCESS for a final
	// answer), before the reply is written.
	AfterSuccess Name = "after-success"
	// AfterPaymentBegin: the order is PAYING and the PENDING payment row is
	// written, before the charge is sent to the provider.
	AfterPaymentBegin Name = "after-payment-begin"
	// AfterCharge: the provider answered the charge, before its answer is
	// recorded: money may have moved while the order is still PAYING.
	AfterCharge Name = "after-charge"
	// AfterSettle: the provider's answer was recorded, and the order left
	// PAYING in the same transaction (or the recording failed), before the
	// reply is written.
	AfterSettle Name = "after-settle"
	// AfterPublish: the outbox relay added its batch to the Redis Stream,
	// before it marks the rows sent: a restart sends them again.
	AfterPublish Name = "after-publish"
	// AfterConsume: a consumer committed an event's effect (and its
	// consumed_events row), before it records the event done in Redis and
	// acknowledges it: the message is delivered again.
	AfterConsume Name = "after-consume"
)

// Names returns every failpoint, in flow order. The slice is the caller's.
func Names() []Name {
	return []Name{AfterClaim, AfterLock, AfterDecrement, AfterCommit, AfterSuccess,
		AfterPaymentBegin, AfterCharge, AfterSettle, AfterPublish, AfterConsume}
}

// Action is what an armed failpoint does when it is reached.
type Action string

// Actions.
const (
	// Kill sends SIGKILL to the process itself.
	Kill Action = "kill"
	// Stop sends SIGSTOP to the process itself.
	Stop Action = "stop"
)

// ErrInvalid is wrapped by the error of a QUORUMLOCK_FAILPOINTS value that
// names an unknown failpoint or action, or is malformed.
var ErrInvalid = errors.New("failpoint: invalid specification")

// Set is the failpoints armed in one process. Its methods are safe for
// concurrent use, and a nil *Set is valid: nothing is armed.
type Set struct {
	points  map[Name]*point // nil: nothing armed
	ignored bool            // the variable was set in a build that cannot arm
}

// Armed reports whether any failpoint is armed.
func (s *Set) Armed() bool { return s != nil && len(s.points) > 0 }

// Ignored reports whether QUORUMLOCK_FAILPOINTS was set but this build
// cannot arm failpoints (it was built without the failpoints tag), so the
// setting had no effect.
func (s *Set) Ignored() bool { return s != nil && s.ignored }

// String lists the armed failpoints as name=action, comma-separated, in
// flow order: the form FromEnv reads. It is "" when nothing is armed.
func (s *Set) String() string {
	if !s.Armed() {
		return ""
	}
	var b strings.Builder
	for _, n := range Names() {
		if p := s.points[n]; p != nil {
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			b.WriteString(string(n) + "=" + string(p.action))
			if p.at > 1 {
				b.WriteString("@" + strconv.FormatInt(p.at, 10))
			}
		}
	}
	return b.String()
}

// parse reads a specification such as "after-lock=kill, after-commit=stop".
// Blank entries are not allowed, but a blank specification arms nothing.
func parse(spec string) (map[Name]*point, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, nil
	}
	points := map[Name]*point{}
	for _, item := range strings.Split(spec, ",") {
		name, action, ok := strings.Cut(strings.TrimSpace(item), "=")
		action, nth, hasNth := strings.Cut(action, "@")
		n, a, at := Name(strings.TrimSpace(name)), Action(strings.TrimSpace(action)), 1
		if hasNth {
			var err error
			if at, err = strconv.Atoi(strings.TrimSpace(nth)); err != nil || at < 1 || at > 1000 {
				return nil, fmt.Errorf("%w: %s: failpoint %s: @%q: want a hit number from 1 to 1000", ErrInvalid, EnvVar, n, nth)
			}
		}
		switch {
		case !ok || n == "" || a == "":
			return nil, fmt.Errorf("%w: %s entry %q: want name=action", ErrInvalid, EnvVar, strings.TrimSpace(item))
		case !known(n):
			return nil, fmt.Errorf("%w: %s: unknown failpoint %q (known: %s)", ErrInvalid, EnvVar, n, list(Names()))
		case a != Kill && a != Stop:
			return nil, fmt.Errorf("%w: %s: failpoint %s: unknown action %q (want kill or stop)", ErrInvalid, EnvVar, n, a)
		case points[n] != nil:
			return nil, fmt.Errorf("%w: %s names failpoint %s twice", ErrInvalid, EnvVar, n)
		}
		points[n] = &point{action: a, at: int64(at)}
	}
	return points, nil
}

func known(n Name) bool {
	for _, k := range Names() {
		if k == n {
			return true
		}
	}
	return false
}

func list(ns []Name) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = string(n)
	}
	return strings.Join(s, ", ")
}
