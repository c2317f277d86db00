package checker

import (
	"fmt"
	"math"
	"time"

	"github.com/anishathalye/porcupine"
)

// RegisterKind is the kind of one operation on a fenced register.
type RegisterKind int

// The operations of a fenced read-modify-write (fencing.Table.Claim, then
// fencing.Table.Update with Claimed).
const (
	// OpClaim reads the value and records the fence, if the fence is above
	// the register's.
	OpClaim RegisterKind = iota + 1
	// OpWrite stores a value, if the register still carries the writer's
	// fence.
	OpWrite
)

// Outcome is what the client learnt about one operation.
type Outcome int

// Outcomes of a register operation.
const (
	// Accepted: the register took the operation.
	Accepted Outcome = iota + 1
	// Rejected: the register refused it (a stale or unclaimed fence) and
	// changed nothing.
	Rejected
	// Unknown: no answer came (a timeout, or the client died); the
	// operation may or may not have taken effect.
	Unknown
)

// RegisterOp is one operation on a fenced register (a row with a value and
// the highest fence it has seen), as the client saw it.
type RegisterOp struct {
	Client  int
	Kind    RegisterKind
	Fence   int64
	Value   int64 // the value a claim returned, or the value a write stored
	Outcome Outcome
	// Call and Return are wall-clock Unix nanoseconds read on one machine;
	// Return is 0 for an operation that never returned.
	Call, Return int64
}

type regState struct{ value, fence int64 }

// fencedRegister is the sequential specification of a row under
// Claim/Claimed-Update. Unknown outcomes branch: the operation took effect
// or it did not.
func fencedRegister(initial int64) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{regState{value: initial}} },
		Step: func(state, input, output any) []any {
			s := state.(regState)
			op := input.(RegisterOp)
			var took bool
			var next regState
			switch op.Kind {
			case OpClaim:
				took, next = op.Fence > s.fence, regState{s.value, op.Fence}
				if op.Outcome == Accepted && op.Value != s.value {
					return nil // a claim returns the register's value
				}
			case OpWrite:
				took, next = op.Fence == s.fence, regState{op.Value, op.Fence}
			}
			switch op.Outcome {
			case Accepted:
				if took {
					return []any{next}
				}
			case Rejected:
				if !took {
					return []any{s}
				}
			case Unknown:
				if took {
					return []any{s, next}
				}
				return []any{s}
			}
			return nil
		},
		DescribeOperation: func(input, _ any) string {
			op := input.(RegisterOp)
			return fmt.Sprintf("%v", op)
		},
	}
	return nm.ToModel()
}

// Linearizable checks with porcupine that the history of one fenced
// register, starting at initial with fence 0, has a linearization that
// obeys the register's rules: a claim is accepted only with a fence above
// the register's and returns its value; a write is accepted only while the
// register carries the writer's fence. An operation without an answer may
// have taken effect or not. A check that runs out of time is reported as a
// violation, so a clean report always means a proof.
func Linearizable(initial int64, ops []RegisterOp, timeout time.Duration) Report {
	r := Report{Checked: len(ops)}
	history := make([]porcupine.Operation, 0, len(ops))
	for _, op := range ops {
		ret := op.Return
		if ret == 0 || op.Outcome == Unknown {
			ret = math.MaxInt64
		}
		if ret < op.Call {
			r.add("operation %+v returns before it is called", op)
			continue
		}
		history = append(history, porcupine.Operation{ClientId: op.Client, Input: op, Call: op.Call, Return: ret})
	}
	switch res := porcupine.CheckOperationsTimeout(fencedRegister(initial), history, timeout); res {
	case porcupine.Ok:
	case porcupine.Illegal:
		r.add("the fenced register's history of %d operations is not linearizable", len(history))
	default:
		r.add("porcupine could not decide linearizability within %v (%s)", timeout, res)
	}
	return r
}

// LostUpdates compares a read-modify-write resource's final value with the
// decrements it accepted: each accepted write took one unit, so the value
// must have fallen by exactly that many. Any shortfall is an update that a
// later writer overwrote (two holders read the same value).
func LostUpdates(initial, final int64, accepted int) Report {
	r := Report{Checked: accepted}
	if lost := int64(accepted) - (initial - final); lost != 0 {
		r.add("%d lost updates: %d decrements accepted, but the value went from %d to %d", lost, accepted, initial, final)
	}
	return r
}

// Lost returns the number of lost updates LostUpdates found, for tables.
func Lost(initial, final int64, accepted int) int64 {
	return int64(accepted) - (initial - final)
}
