package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quorumlock/quorumlock/fencing"
	"github.com/quorumlock/quorumlock/internal/wait"
	"github.com/quorumlock/quorumlock/lease"
)

// EnvWorker carries a worker's configuration, as JSON, to a worker process.
// A binary that can act as a worker calls [MaybeWorker] first thing in main
// (or TestMain).
const EnvWorker = "QUORUMLOCK_CHAOS_WORKER"

// Tables of the workload, in the bed's main database.
const (
	stockTable  = "kleppmann_stock"
	writesTable = "kleppmann_writes"
	// LockKey is the key every worker locks.
	LockKey = "stock:42"
	product = "42"
)

// WorkerConfig is what one worker process needs.
type WorkerConfig struct {
	ID int `json:"id"`
	// Lock is the backend the worker locks with: LockQuorum (the
	// default) on the Redis addresses, or LockEtcd on the etcd endpoints.
	Lock   string   `json:"lock,omitempty"`
	Redis  []string `json:"redis,omitempty"`
	Etcd   []string `json:"etcd,omitempty"`
	DSN    string   `json:"dsn"`
	Fenced bool     `json:"fenced"`
	Guard  bool     `json:"guard"`
	Seed   uint64   `json:"seed"`
	// Rounds bounds the worker's loop.
	Rounds      int           `json:"rounds"`
	TTL         time.Duration `json:"ttl"`
	NodeTimeout time.Duration `json:"nodeTimeout"`
	// Hold is the usual time between the read and the write; LongHold,
	// taken with probability LongFrac, is meant to outlast the TTL.
	Hold     time.Duration `json:"hold"`
	LongHold time.Duration `json:"longHold"`
	LongFrac float64       `json:"longFrac"`
	// Carts runs the cart workload (cartRound) instead of the single key.
	Carts bool `json:"carts,omitempty"`
	// Prim runs a primitive's workload (PrimSemaphore, PrimRWLock,
	// PrimElection, PrimCounter) instead of the single key.
	Prim string `json:"prim,omitempty"`
}

// Event is one line of a worker's history: the call or the return of one
// operation. Times are wall-clock Unix nanoseconds, comparable across the
// processes of one machine.
type Event struct {
	Worker int    `json:"w"`
	Round  int    `json:"n"`
	Op     string `json:"op"`
	Phase  string `json:"ph"`
	At     int64  `json:"t"`
	Fence  int64  `json:"f,omitempty"`
	Value  int64  `json:"v,omitempty"`
	Until  int64  `json:"u,omitempty"`
	Result string `json:"r,omitempty"`
	Err    string `json:"e,omitempty"`
	// Key names the lock key a cart's read or write is about (its
	// product's); empty for the single-key workload, whose key is LockKey.
	Key string `json:"k,omitempty"`
	// Keys and Fences are a cart lease's keys, sorted, and the fence of
	// each (lock answers, holds, unlocks).
	Keys   []string `json:"ks,omitempty"`
	Fences []int64  `json:"fs,omitempty"`
}

// key is the lock key e is about.
func (e Event) key() string {
	if e.Key == "" {
		return LockKey
	}
	return e.Key
}

// held returns the keys of a lock answer, hold or unlock, and the fence of
// each.
func (e Event) held() ([]string, []int64) {
	if len(e.Keys) == 0 {
		return []string{LockKey}, []int64{e.Fence}
	}
	return e.Keys, e.Fences
}

// fenceOf returns the fence that e, a hold, carries for key, and false
// when e does not hold key.
func (e Event) fenceOf(key string) (int64, bool) {
	keys, fences := e.held()
	if i := slices.Index(keys, key); i >= 0 && i < len(fences) {
		return fences[i], true
	}
	return 0, false
}

// Operations and phases of Event.
const (
	OpLock   = "lock"
	OpRead   = "read"
	OpHold   = "hold"
	OpWrite  = "write"
	OpUnlock = "unlock"

	PhaseCall   = "call"
	PhaseReturn = "return"

	ResultOK    = "ok"
	ResultStale = "stale"
	ResultError = "error"
	// ResultRefused: a cart's row had fewer units than the cart takes; the
	// transaction rolled back.
	ResultRefused = "refused"
	// ResultAborted: a cart's row whose write was undone, or never made,
	// because another row of the cart failed: the transaction rolled back.
	ResultAborted = "aborted"
)

// MaybeWorker runs a worker and exits the process when the environment
// carries a worker configuration ([EnvWorker]); otherwise it returns at
// once. Call it first thing in main or TestMain.
func MaybeWorker() {
	raw, ok := os.LookupEnv(EnvWorker)
	if !ok {
		return
	}
	var cfg WorkerConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "chaos worker: bad %s: %v\n", EnvWorker, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := RunWorker(ctx, cfg, os.Stdin, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos worker %d: %v\n", cfg.ID, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Control lines a worker reads on its input.
const (
	// ctlGate makes the worker finish its round and wait before its next
	// lock call.
	ctlGate = "gate"
	// ctlOpen lets a gated worker go on.
	ctlOpen = "open"
)

// RunWorker runs the workload loop until cfg.Rounds are done, ctx ends or
// in reaches its end (the parent is gone), writing one JSON Event per line
// to out. Lines read from in control it: "gate" holds the worker before its
// next lock call, "open" lets it go on.
func RunWorker(ctx context.Context, cfg WorkerConfig, in io.Reader, out io.Writer) error {
	if cfg.Rounds <= 0 || cfg.TTL <= 0 || !cfg.hasServers() {
		return errors.New("worker needs Rounds, TTL and the addresses of its lock's servers")
	}
	ctx, parentGone := context.WithCancel(ctx)
	defer parentGone()
	g := newGate()
	// The reader ends when in does: in a worker process, when the parent
	// closes the pipe or dies.
	go func() {
		defer parentGone()
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			g.set(strings.TrimSpace(sc.Text()) == ctlGate)
		}
	}()
	setup, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(setup, cfg.DSN)
	if err != nil {
		return err
	}
	defer pool.Close()
	issuer, err := fencing.NewIssuer(pool)
	if err != nil {
		return err
	}
	rows := stockTable
	if cfg.Carts {
		rows = cartStockTable
	}
	table, err := fencing.NewTable(rows, "product_id")
	if err != nil {
		return err
	}
	l, closeLocker, err := newLocker(cfg, issuer)
	if err != nil {
		return err
	}
	defer closeLocker()
	w := &worker{cfg: cfg, out: out, pool: pool, table: table, locker: l,
		rng: rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.ID)+1))}
	if cfg.Prim != "" {
		return w.primLoop(ctx, g)
	}
	for n := 0; n < cfg.Rounds && ctx.Err() == nil; n++ {
		if !g.wait(ctx) {
			break
		}
		if cfg.Carts {
			w.cartRound(ctx, n)
		} else {
			w.round(ctx, n)
		}
	}
	return w.err
}

// gate holds a worker between rounds while it is closed.
type gate struct {
	mu     sync.Mutex
	closed bool
	open   chan struct{} // closed while the gate is open
}

func newGate() *gate {
	ch := make(chan struct{})
	close(ch)
	return &gate{open: ch}
}

func (g *gate) set(closed bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if closed == g.closed {
		return
	}
	g.closed = closed
	if closed {
		g.open = make(chan struct{})
	} else {
		close(g.open)
	}
}

// wait returns true once the gate is open, false when ctx ends first.
func (g *gate) wait(ctx context.Context) bool {
	g.mu.Lock()
	ch := g.open
	g.mu.Unlock()
	select {
	case <-ch:
		return ctx.Err() == nil
	case <-ctx.Done():
		return false
	}
}

type worker struct {
	cfg    WorkerConfig
	out    io.Writer
	pool   *pgxpool.Pool
	table  *fencing.Table
	locker lease.Locker
	rng    *rand.Rand

	mu  sync.Mutex
	err error
}

func (w *worker) emit(e Event) {
	e.Worker = w.cfg.ID
	if e.At == 0 {
		e.At = time.Now().UnixNano()
	}
	b, _ := json.Marshal(e)
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, err := w.out.Write(append(b, '\n')); err != nil && w.err == nil {
		w.err = err
	}
}

func result(err error) (string, string) {
	switch {
	case err == nil:
		return ResultOK, ""
	case errors.Is(err, fencing.ErrStaleFence), errors.Is(err, fencing.ErrNotClaimed):
		return ResultStale, err.Error()
	case errors.Is(err, fencing.ErrConditionFailed):
		return ResultRefused, err.Error()
	default:
		return ResultError, err.Error()
	}
}

// round is one pass of the loop. Database calls run under a context that
// outlives the lease on purpose: a holder that stops trusting its lease
// would hide exactly the fault the run looks for.
func (w *worker) round(ctx context.Context, n int) {
	w.emit(Event{Round: n, Op: OpLock, Phase: PhaseCall})
	le, err := w.locker.Lock(ctx, LockKey)
	if err != nil {
		r, msg := result(err)
		w.emit(Event{Round: n, Op: OpLock, Phase: PhaseReturn, Result: r, Err: msg})
		_ = wait.Sleep(ctx, 5*time.Millisecond)
		return
	}
	until := wallUntil(le)
	fence := le.Fence()
	w.emit(Event{Round: n, Op: OpLock, Phase: PhaseReturn, Result: ResultOK, Fence: fence, Until: until})
	defer w.unlock(ctx, le, Event{Round: n, Fence: fence})
	db, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()

	w.emit(Event{Round: n, Op: OpRead, Phase: PhaseCall, Fence: fence})
	var v int64
	if w.cfg.Fenced {
		err = w.table.Claim(db, w.pool, product, fence, []string{"available"}, &v)
	} else {
		err = w.pool.QueryRow(db, "SELECT available FROM "+stockTable+" WHERE product_id = $1", product).Scan(&v)
	}
	r, msg := result(err)
	w.emit(Event{Round: n, Op: OpRead, Phase: PhaseReturn, Fence: fence, Value: v, Result: r, Err: msg})
	if err != nil {
		return
	}

	w.hold(ctx, Event{Round: n, Fence: fence, Until: wallUntil(le)})

	w.emit(Event{Round: n, Op: OpWrite, Phase: PhaseCall, Fence: fence, Value: v - 1})
	err = w.write(db, fence, v)
	r, msg = result(err)
	w.emit(Event{Round: n, Op: OpWrite, Phase: PhaseReturn, Fence: fence, Value: v - 1, Result: r, Err: msg})
}

// unlock releases le at the end of a round; e carries the round and its
// fences. The call carries the lease's validity end as the holder sees it
// then: an etcd session's keep-alive moves it on while the lease is held.
func (w *worker) unlock(ctx context.Context, le lease.Lease, e Event) {
	e.Op, e.Phase, e.Until = OpUnlock, PhaseCall, wallUntil(le)
	w.emit(e)
	e.Until = 0
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*w.cfg.TTL)
	err := le.Unlock(uctx)
	cancel()
	e.Phase = PhaseReturn
	e.Result, e.Err = result(err)
	w.emit(e)
}

// hold waits between the read and the write: Hold, or with probability
// LongFrac the LongHold meant to outlast the TTL, jittered. e carries the
// round, its fences and its validity end.
func (w *worker) hold(ctx context.Context, e Event) {
	d := w.cfg.Hold
	if w.cfg.LongFrac > 0 && w.rng.Float64() < w.cfg.LongFrac {
		d = w.cfg.LongHold
	}
	if d > 0 {
		d = d/2 + time.Duration(w.rng.Int64N(int64(d)))
	}
	e.Op, e.Phase, e.Value = OpHold, PhaseCall, int64(d)
	w.emit(e)
	_ = wait.Sleep(ctx, d)
}

// write stores read-1 and logs the write in the same transaction, so the
// log's order is the commit order.
func (w *worker) write(ctx context.Context, fence, read int64) error {
	return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		var err error
		if w.cfg.Fenced {
			err = w.table.Update(ctx, tx, fencing.Update{Key: product, Fence: fence, Claimed: true,
				Set: []fencing.Assignment{fencing.Set("available", read-1)}})
		} else {
			_, err = tx.Exec(ctx, "UPDATE "+stockTable+" SET available = $1 WHERE product_id = $2", read-1, product)
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "INSERT INTO "+writesTable+" (fence, worker, read, wrote) VALUES ($1, $2, $3, $4)",
			fence, w.cfg.ID, read, read-1)
		return err
	})
}
