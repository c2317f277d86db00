package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quorumlock/quorumlock/devtools/checker"
)

// logRow is one operation the resource of a primitive workload accepted.
type logRow struct {
	kind, holder, slot string
	fence              int64
}

// primReport is what checkPrim found.
type primReport struct {
	violations []string
	// broken counts the violations.
	broken int
	// maxHolders is the most holders inside the semaphore's resource at
	// once; 0 for the other workloads.
	maxHolders int
	// accepted counts the work's accepted writes.
	accepted int
	// stale lists the accepted writes the fence check judges.
	stale []checker.Write
}

// checkPrim judges the log of a primitive workload's resource with the
// model resource of its checker, in the order the resource accepted the
// operations. The database applied the fence rule (fenced runs), so the
// model runs in the run's mode: in the fenced mode, an operation the model
// refuses is one the database should have refused. An election's writes
// are judged as accepted (the model's unfenced mode): two leaders writing
// in one term, or a term going down, is a violation whatever the mode.
func checkPrim(prim string, fenced bool, log []logRow) primReport {
	var rep primReport
	mode := checker.Unfenced
	if fenced && prim != PrimCounter {
		mode = checker.Fenced
	}
	refused := 0
	switch prim {
	case PrimSemaphore, PrimCounter:
		var ops []checker.SemOp
		for _, l := range log {
			k := checker.SemEnter
			if l.kind == logExit {
				k = checker.SemExit
				rep.accepted++
				rep.stale = append(rep.stale, checker.Write{Resource: l.slot, Fence: l.fence, Writer: l.holder})
			}
			ops = append(ops, checker.SemOp{Kind: k, Holder: l.holder, Slot: l.slot, Fence: l.fence})
		}
		v := checker.CheckSemaphore(SemPermits, mode, ops)
		rep.violations, rep.maxHolders, refused = v.Violations, v.MaxHolders, v.Rejected
		if prim == PrimCounter {
			rep.stale = nil // its permits have no fence
		}
	case PrimRWLock:
		kinds := map[string]checker.RWKind{logReadBegin: checker.ReadBegin, logReadEnd: checker.ReadEnd,
			logWriteBegin: checker.WriteBegin, logWriteEnd: checker.WriteEnd}
		var ops []checker.RWOp
		for _, l := range log {
			if l.kind == logWriteEnd {
				rep.accepted++
				rep.stale = append(rep.stale, checker.Write{Resource: l.slot, Fence: l.fence, Writer: l.holder})
			}
			ops = append(ops, checker.RWOp{Kind: kinds[l.kind], Holder: l.holder, Fence: l.fence})
		}
		v := checker.CheckRW(mode, ops)
		rep.violations, refused = v.Violations, v.Rejected
	case PrimElection:
		var writes []checker.TermWrite
		for _, l := range log {
			writes = append(writes, checker.TermWrite{Leader: l.holder, Term: l.fence})
		}
		v := checker.CheckElection(checker.Unfenced, writes)
		rep.violations, rep.accepted = v.Violations, v.Accepted
	}
	if refused > 0 {
		rep.violations = append(rep.violations, fmt.Sprintf("the resource accepted %d operations whose fence was below the last it had let in", refused))
	}
	rep.broken = len(rep.violations)
	return rep
}

// readPrimLog reads the resource's log in the order it accepted the
// operations.
func (e *Env) readPrimLog(ctx context.Context) ([]logRow, error) {
	rows, err := e.pool.Query(ctx, "SELECT kind, holder, slot, fence FROM "+primLogTable+" ORDER BY seq")
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (logRow, error) {
		var l logRow
		return l, row.Scan(&l.kind, &l.holder, &l.slot, &l.fence)
	})
}

// judgePrim runs the checks of a primitive workload's run.
func (e *Env) judgePrim(ctx context.Context, r *run, res *Result) error {
	log, err := e.readPrimLog(ctx)
	if err != nil {
		return err
	}
	rep := checkPrim(r.sc.Prim, r.fenced, log)
	events := r.hist.all()
	res.History = events
	t, holds := primTally(events)
	res.Locks, res.Attempts, res.Rejected, res.Errors = t.locks, t.attempts, t.rejected, t.errors
	res.Accepted, res.Broken, res.MaxHolders = rep.accepted, rep.broken, rep.maxHolders
	res.Violations = append(res.Violations, rep.violations...)
	fenc := checker.Fencing(rep.stale)
	res.StaleAccepted = len(fenc.Violations)
	res.Violations = append(res.Violations, fenc.Violations...)
	res.Overlaps = len(checker.Exclusion(holds).Violations)
	res.Linearizable = "-"
	return nil
}

// primTally counts a primitive run's acquisitions, the operations the
// resource refused for a stale fence and those that failed otherwise, and
// returns the exclusive leases (permits, write leases, leaderships) as
// holds for the exclusion check; a read lease excludes nothing.
func primTally(events []Event) (tally, []checker.Hold) {
	var t tally
	type open struct {
		hold  checker.Hold
		until int64
	}
	leases := map[opKey]*open{}
	var order []opKey
	for _, e := range events {
		k := opKey{e.Worker, e.Round}
		switch {
		case e.Op == OpLock && e.Phase == PhaseCall:
			t.attempts++
		case e.Op == OpLock && e.Phase == PhaseReturn && e.Result == ResultOK:
			t.locks++
			if e.Key == "read" {
				continue
			}
			key, fence := primName, e.Fence
			if len(e.Keys) == 1 && len(e.Fences) == 1 {
				key, fence = e.Keys[0], e.Fences[0]
			}
			leases[k] = &open{hold: checker.Hold{Key: key, Holder: fmt.Sprintf("worker%d#%d", e.Worker, e.Round), Fence: fence,
				From: time.Unix(0, e.At)}, until: e.Until}
			order = append(order, k)
		case (e.Op == OpHold || e.Op == OpUnlock) && e.Phase == PhaseCall:
			if l := leases[k]; l != nil && l.hold.To.IsZero() {
				if e.Until != 0 {
					l.until = e.Until
				}
				if e.Op == OpUnlock {
					l.hold.To = time.Unix(0, min(e.At, l.until))
				}
			}
		case e.Op != OpLock && e.Op != OpUnlock && e.Phase == PhaseReturn && e.Result == ResultStale:
			t.rejected++
		case e.Op != OpLock && e.Op != OpUnlock && e.Phase == PhaseReturn && e.Result == ResultError:
			t.errors++
		}
	}
	holds := make([]checker.Hold, 0, len(order))
	for _, k := range order {
		l := leases[k]
		if l.hold.To.IsZero() {
			l.hold.To = time.Unix(0, l.until)
		}
		holds = append(holds, l.hold)
	}
	return t, holds
}
