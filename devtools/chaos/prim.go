package chaos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quorumlock/quorumlock/fencing"
	"github.com/quorumlock/quorumlock/internal/wait"
	"github.com/quorumlock/quorumlock/lease"
)

// The primitive workloads (Scenario.Prim, WorkerConfig.Prim).
const (
	// PrimSemaphore: each round takes one of SemPermits permits, enters
	// the resource with the permit's fence, holds, exits, releases.
	PrimSemaphore = "semaphore"
	// PrimRWLock: each round reads (a read lease, no fence) or writes
	// (the write lease, fenced).
	PrimRWLock = "rwlock"
	// PrimElection: each round campaigns; the leader writes with its term.
	PrimElection = "election"
	// PrimCounter: PrimSemaphore's workload on the per-node counter
	// semaphore (devtools/countersem), which has no fence.
	PrimCounter = "countersem"
)

// SemPermits is the permit count of the semaphore workloads.
const SemPermits = 2

// primName is the name of every primitive of the workloads.
const primName = "chaos-prim"

// Tables of the primitive workloads, in the bed's main database.
const (
	// primSlotsTable has one row per slot: a permit's key, the rwlock's
	// name, the election's name. last_fence is the last fence it let in.
	primSlotsTable = "prim_slots"
	// primLogTable logs every operation the resource accepted, in the
	// order it accepted them (each runs under one advisory lock).
	primLogTable = "prim_log"
	// primLockID is the advisory lock that orders the resource's operations.
	primLockID = 4242
)

// Kinds of the resource's operations in primLogTable.
const (
	logEnter      = "enter"
	logExit       = "exit"
	logReadBegin  = "read-begin"
	logReadEnd    = "read-end"
	logWriteBegin = "write-begin"
	logWriteEnd   = "write-end"
	logTerm       = "term"
)

// Operations of the readers of the rwlock workload: a reader carries no
// fence and is never staged.
const (
	OpReadBegin = "read-begin"
	OpReadEnd   = "read-end"
)

func primSchema() string {
	return `
		DROP TABLE IF EXISTS ` + primSlotsTable + `, ` + primLogTable + `;
		CREATE TABLE ` + primSlotsTable + ` (slot text PRIMARY KEY, last_fence bigint NOT NULL, work bigint NOT NULL DEFAULT 0);
		CREATE TABLE ` + primLogTable + ` (seq bigserial PRIMARY KEY, kind text NOT NULL, holder text NOT NULL, slot text NOT NULL, fence bigint NOT NULL);`
}

// resourceOp is one operation at the resource: kind by holder on slot
// with fence. fenced (the fenced run, on an operation that carries a
// fence) makes it conditional: claim sets the slot's last_fence to fence
// if it is not above; an operation that does not claim only checks it.
type resourceOp struct {
	kind, holder, slot string
	fence              int64
	fenced, claim      bool
	// record: the resource only records the operation (a reader's).
	record bool
}

// apply runs op in one transaction under the resource's advisory lock, so
// the log's order is the order the resource accepted them in. A fenced
// operation the slot refuses fails with fencing.ErrStaleFence and logs
// nothing.
func (w *worker) apply(ctx context.Context, op resourceOp) error {
	return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", primLockID); err != nil {
			return err
		}
		if op.record {
			_, err := tx.Exec(ctx, "INSERT INTO "+primLogTable+" (kind, holder, slot, fence) VALUES ($1, $2, $3, 0)", op.kind, op.holder, op.slot)
			return err
		}
		var q string
		switch {
		case op.claim && op.fenced:
			q = "INSERT INTO " + primSlotsTable + " (slot, last_fence) VALUES ($1, $2) ON CONFLICT (slot) DO UPDATE SET last_fence = EXCLUDED.last_fence WHERE " + primSlotsTable + ".last_fence <= EXCLUDED.last_fence"
		case op.claim:
			q = "INSERT INTO " + primSlotsTable + " (slot, last_fence) VALUES ($1, $2) ON CONFLICT (slot) DO UPDATE SET last_fence = EXCLUDED.last_fence"
		case op.fenced:
			q = "UPDATE " + primSlotsTable + " SET work = work + 1 WHERE slot = $1 AND last_fence <= $2"
		default:
			q = "UPDATE " + primSlotsTable + " SET work = work + 1 WHERE slot = $1 AND $2::bigint IS NOT NULL"
		}
		tag, err := tx.Exec(ctx, q, op.slot, op.fence)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 && (op.fenced || op.claim) {
			return fmt.Errorf("%s by %s on %s with fence %d: %w", op.kind, op.holder, op.slot, op.fence, fencing.ErrStaleFence)
		}
		_, err = tx.Exec(ctx, "INSERT INTO "+primLogTable+" (kind, holder, slot, fence) VALUES ($1, $2, $3, $4)", op.kind, op.holder, op.slot, op.fence)
		return err
	})
}

// step emits the call and return of one operation at the resource around
// do, and returns do's error.
func (w *worker) step(e Event, do func() error) error {
	e.Phase = PhaseCall
	w.emit(e)
	err := do()
	e.Phase = PhaseReturn
	e.Result, e.Err = result(err)
	w.emit(e)
	return err
}

// holder names round n of this worker at the resource.
func (w *worker) holder(n int) string { return fmt.Sprintf("worker%d#%d", w.cfg.ID, n) }

// dbCtx is the context of a round's database calls: it outlives the lease
// on purpose, as in round.
func dbCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
}

// lockFailed reports a failed acquisition and backs off briefly.
func (w *worker) lockFailed(ctx context.Context, e Event, err error) {
	e.Op, e.Phase = OpLock, PhaseReturn
	e.Result, e.Err = result(err)
	w.emit(e)
	_ = wait.Sleep(ctx, 5*time.Millisecond)
}

// semRound is one pass of the semaphore loop: take a permit, enter the
// resource with its fence (a claim of the permit's row), hold (sometimes
// past the TTL), exit (the work's write, fenced with the same fence),
// release.
func (w *worker) semRound(ctx context.Context, n int, sem lease.Semaphore) {
	w.emit(Event{Round: n, Op: OpLock, Phase: PhaseCall})
	le, err := sem.Acquire(ctx)
	if err != nil {
		w.lockFailed(ctx, Event{Round: n}, err)
		return
	}
	key, fence := le.Key(), le.Fence()
	keys, fences := []string{key}, []int64{fence}
	w.emit(Event{Round: n, Op: OpLock, Phase: PhaseReturn, Result: ResultOK, Keys: keys, Fences: fences, Until: wallUntil(le)})
	defer w.unlock(ctx, le, Event{Round: n, Keys: keys, Fences: fences})
	db, cancel := dbCtx(ctx)
	defer cancel()
	h := w.holder(n)
	err = w.step(Event{Round: n, Op: OpRead, Key: key, Fence: fence}, func() error {
		return w.apply(db, resourceOp{kind: logEnter, holder: h, slot: key, fence: fence, fenced: w.cfg.Fenced, claim: true})
	})
	if err != nil {
		return
	}
	w.hold(ctx, Event{Round: n, Keys: keys, Fences: fences, Until: wallUntil(le)})
	_ = w.step(Event{Round: n, Op: OpWrite, Key: key, Fence: fence}, func() error {
		return w.apply(db, resourceOp{kind: logExit, holder: h, slot: key, fence: fence, fenced: w.cfg.Fenced})
	})
}

// rwRound is one pass of the read-write lock loop: a read or a write, at
// random.
func (w *worker) rwRound(ctx context.Context, n int, rw lease.RWLock) {
	if w.rng.IntN(2) == 0 {
		w.readRound(ctx, n, rw)
		return
	}
	w.emit(Event{Round: n, Op: OpLock, Phase: PhaseCall})
	le, err := rw.Lock(ctx)
	if err != nil {
		w.lockFailed(ctx, Event{Round: n}, err)
		return
	}
	fence := le.Fence()
	w.emit(Event{Round: n, Op: OpLock, Phase: PhaseReturn, Result: ResultOK, Fence: fence, Until: wallUntil(le)})
	defer w.unlock(ctx, le, Event{Round: n, Fence: fence})
	db, cancel := dbCtx(ctx)
	defer cancel()
	// The hold comes before the write: a writer paused there, past its
	// TTL, comes back to a resource that readers or a newer writer used.
	w.hold(ctx, Event{Round: n, Fence: fence, Until: wallUntil(le)})
	h := w.holder(n)
	err = w.step(Event{Round: n, Op: OpRead, Fence: fence}, func() error {
		return w.apply(db, resourceOp{kind: logWriteBegin, holder: h, slot: primName, fence: fence, fenced: w.cfg.Fenced, claim: true})
	})
	if err != nil {
		return
	}
	_ = wait.Sleep(ctx, w.cfg.Hold/2)
	_ = w.step(Event{Round: n, Op: OpWrite, Fence: fence}, func() error {
		return w.apply(db, resourceOp{kind: logWriteEnd, holder: h, slot: primName, fence: fence, fenced: w.cfg.Fenced})
	})
}

// readRound takes a read lease, records the read's beginning and end at
// the resource around a short hold, and releases it.
func (w *worker) readRound(ctx context.Context, n int, rw lease.RWLock) {
	w.emit(Event{Round: n, Op: OpLock, Phase: PhaseCall, Key: "read"})
	le, err := rw.RLock(ctx)
	if err != nil {
		w.lockFailed(ctx, Event{Round: n, Key: "read"}, err)
		return
	}
	w.emit(Event{Round: n, Op: OpLock, Phase: PhaseReturn, Result: ResultOK, Key: "read", Until: wallUntil(le)})
	defer w.unlock(ctx, le, Event{Round: n, Key: "read"})
	db, cancel := dbCtx(ctx)
	defer cancel()
	h := w.holder(n)
	if w.step(Event{Round: n, Op: OpReadBegin}, func() error {
		return w.apply(db, resourceOp{kind: logReadBegin, holder: h, slot: primName, record: true})
	}) != nil {
		return
	}
	_ = wait.Sleep(ctx, w.cfg.Hold)
	_ = w.step(Event{Round: n, Op: OpReadEnd}, func() error {
		return w.apply(db, resourceOp{kind: logReadEnd, holder: h, slot: primName, record: true})
	})
}

// electRound is one pass of the election loop: campaign, write with the
// term, hold, write with the term again, resign.
func (w *worker) electRound(ctx context.Context, n int, el lease.Election) {
	w.emit(Event{Round: n, Op: OpLock, Phase: PhaseCall})
	cctx, cancel := context.WithTimeout(ctx, 3*w.cfg.TTL)
	le, err := el.Campaign(cctx, w.holder(n))
	cancel()
	if err != nil {
		w.lockFailed(ctx, Event{Round: n}, err)
		return
	}
	term := le.Fence()
	w.emit(Event{Round: n, Op: OpLock, Phase: PhaseReturn, Result: ResultOK, Fence: term, Until: wallUntil(le)})
	defer w.resign(ctx, el, le, Event{Round: n, Fence: term})
	db, cancelDB := dbCtx(ctx)
	defer cancelDB()
	h := w.holder(n)
	write := func() error {
		return w.apply(db, resourceOp{kind: logTerm, holder: h, slot: primName, fence: term, fenced: w.cfg.Fenced, claim: true})
	}
	if w.step(Event{Round: n, Op: OpRead, Fence: term}, write) != nil {
		return
	}
	w.hold(ctx, Event{Round: n, Fence: term, Until: wallUntil(le)})
	_ = w.step(Event{Round: n, Op: OpWrite, Fence: term}, write)
}

// resign ends a leadership at the end of a round, like unlock.
func (w *worker) resign(ctx context.Context, el lease.Election, le lease.Lease, e Event) {
	e.Op, e.Phase, e.Until = OpUnlock, PhaseCall, wallUntil(le)
	w.emit(e)
	e.Until = 0
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*w.cfg.TTL)
	err := el.Resign(rctx)
	cancel()
	if errors.Is(err, lease.ErrNotLeader) {
		err = nil // the leadership had ended already
	}
	e.Phase = PhaseReturn
	e.Result, e.Err = result(err)
	w.emit(e)
}
