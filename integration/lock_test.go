package integration_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/devtools/checker"
	"github.com/quorumlock/quorumlock/devtools/nemesis"
	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/fencing"
	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/quorum"
)

// resource is a Postgres row guarded by a fence, with a log of every write
// it accepted in commit order.
type resource struct {
	pool  *pgxpool.Pool
	table *fencing.Table
}

func newResource(t *testing.T, ctx context.Context, dsn string) (*resource, *fencing.Issuer) {
	t.Helper()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := fencing.EnsureSchema(ctx, pool); err != nil {
		t.Fatal(err)
	}
	_, err = pool.Exec(ctx, `
		CREATE TABLE guarded (id text PRIMARY KEY, value bigint NOT NULL, last_fence bigint NOT NULL DEFAULT 0);
		CREATE TABLE write_log (seq bigserial PRIMARY KEY, id text NOT NULL, fence bigint NOT NULL, writer text NOT NULL);
		INSERT INTO guarded (id, value) VALUES ('counter', 0);`)
	if err != nil {
		t.Fatal(err)
	}
	table, err := fencing.NewTable("guarded", "id")
	if err != nil {
		t.Fatal(err)
	}
	issuer, err := fencing.NewIssuer(pool)
	if err != nil {
		t.Fatal(err)
	}
	return &resource{pool: pool, table: table}, issuer
}

// write increments the counter under fence and logs the write, in one
// transaction, so the log's order is the commit order.
func (r *resource) write(ctx context.Context, fence int64, writer string) error {
	return pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		err := r.table.Update(ctx, tx, fencing.Update{
			Key: "counter", Fence: fence,
			Set: []fencing.Assignment{fencing.Add("value", 1)},
		})
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "INSERT INTO write_log (id, fence, writer) VALUES ('counter', $1, $2)", fence, writer)
		return err
	})
}

func (r *resource) accepted(t *testing.T, ctx context.Context) []checker.Write {
	t.Helper()
	rows, err := r.pool.Query(ctx, "SELECT id, fence, writer FROM write_log ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	ws, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (checker.Write, error) {
		var w checker.Write
		return w, row.Scan(&w.Resource, &w.Fence, &w.Writer)
	})
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

func clientsOf(cs []*redis.Client) []redis.UniversalClient {
	out := make([]redis.UniversalClient, len(cs))
	for i, c := range cs {
		out[i] = c
	}
	return out
}

// TestLockUnderFaults runs workers that lock one key, write a fenced
// resource and unlock, while the nemesis pauses, partitions, slows, kills
// and restarts (with and without data) one node at a time. The checker must
// find no two holders at once and no out-of-order fenced write, and the
// workers must make progress.
func TestLockUnderFaults(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Redis: 5, Postgres: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, issuer := newResource(t, ctx, bedtest.NewDatabase(t, bed.Postgres))

	const ttl = 1 * time.Second
	l, err := quorum.New(clientsOf(bedtest.RedisClients(t, bed)),
		quorum.WithTTL(ttl), quorum.WithNodeTimeout(250*time.Millisecond),
		quorum.WithMaxWait(3*time.Second), quorum.WithFencer(issuer))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	// Fresh nodes stay out of the vote for one window; wait that out.
	waitLockable(t, ctx, l)

	plan, err := nemesis.Plan(nemesis.PlanOptions{Seed: 20261130, Nodes: 5, Steps: 24, MaxFor: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stopWorkers := context.WithCancel(ctx)
	var holds checker.Holds
	var wg sync.WaitGroup
	var mu sync.Mutex
	counts := map[string]int{}
	count := func(what string) { mu.Lock(); counts[what]++; mu.Unlock() }
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("worker%d", w)
			for i := 0; i < 500 && runCtx.Err() == nil; i++ {
				le, err := l.Lock(runCtx, "guarded:counter")
				if err != nil {
					count("lock failed")
					continue
				}
				from := time.Now()
				werr := res.write(runCtx, le.Fence(), name)
				to := time.Now()
				if u := le.Until(); u.Before(to) {
					to = u // the holder stops trusting the lease at its validity end
				}
				_ = le.Unlock(context.WithoutCancel(runCtx))
				holds.Add(checker.Hold{Key: "guarded:counter", Holder: fmt.Sprintf("%s#%d", name, i), Fence: le.Fence(), From: from, To: to})
				switch {
				case werr == nil:
					count("written")
				case errors.Is(werr, fencing.ErrStaleFence):
					count("stale fence rejected")
				default:
					count("write failed")
					t.Logf("%s#%d: write failed: %v", name, i, werr)
				}
			}
		}()
	}
	var steps []string
	nerr := nemesis.Run(ctx, bed.Redis, plan, func(s nemesis.Step) { steps = append(steps, s.String()) })
	stopWorkers()
	wg.Wait()
	if nerr != nil {
		t.Fatal(nerr)
	}
	t.Logf("faults: %d steps; outcomes: %v", len(steps), counts)

	excl := checker.Exclusion(holds.All())
	accepted := res.accepted(t, ctx)
	fenc := checker.Fencing(accepted)
	t.Logf("exclusion: %v", excl)
	t.Logf("fencing: %v", fenc)
	if !excl.OK() || !fenc.OK() {
		t.Fatalf("safety violated under faults %v", steps)
	}
	if counts["written"] < 10 {
		t.Fatalf("only %d writes went through: the lock made too little progress under single-node faults", counts["written"])
	}
	var value int64
	if err := res.pool.QueryRow(ctx, "SELECT value FROM guarded WHERE id = 'counter'").Scan(&value); err != nil {
		t.Fatal(err)
	}
	// The increment and its log row commit together, so they must agree.
	// A write the worker saw fail may still have committed (its context
	// was cancelled mid-commit when the run stopped): that is the only
	// slack between what the workers counted and what the table holds.
	if value != int64(len(accepted)) {
		t.Fatalf("counter is %d but %d writes were logged", value, len(accepted))
	}
	if lo, hi := int64(counts["written"]), int64(counts["written"]+counts["write failed"]); value < lo || value > hi {
		t.Fatalf("counter is %d; the workers saw %d writes succeed and %d fail", value, lo, hi-lo)
	}
}

// TestAmnesiaDoubleGrantIsCaughtAndFenced stages Redlock's known failure:
// a holder owns exactly a majority, one of those nodes restarts without
// its data, and a second client wins the other majority. With the amnesia
// guard off (the negative control) the checker must see two holders at
// once, and the fence must still reject the late holder's write. With the
// guard on, the second client must not get the lock inside the window,
// however many times it tries while the first still holds it.
func TestAmnesiaDoubleGrantIsCaughtAndFenced(t *testing.T) {
	for _, guard := range []bool{false, true} {
		t.Run(fmt.Sprintf("guard=%v", guard), func(t *testing.T) {
			bed := bedtest.Start(t, testbed.Options{Redis: 5, Postgres: true})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			res, issuer := newResource(t, ctx, bedtest.NewDatabase(t, bed.Postgres))
			// The node timeout covers a first call on a new connection
			// (connect, HELLO, EVALSHA, NOSCRIPT, EVAL and its fsync) on a
			// loaded machine; 2*nodeTimeout + drift allowance stays far
			// below the TTL, so A's lease outlasts all of B's attempts.
			const ttl = 20 * time.Second
			const nodeTimeout = 2 * time.Second
			opts := []quorum.Option{quorum.WithTTL(ttl), quorum.WithNodeTimeout(nodeTimeout),
				quorum.WithRetry(quorum.Retry{Attempts: 5, BaseDelay: 50 * time.Millisecond, MaxDelay: 500 * time.Millisecond}),
				quorum.WithFencer(issuer), quorum.WithAmnesiaGuard(guard), quorum.WithAmnesiaWindow(ttl)}
			failedA := newAcquireFailures("guarded:counter")
			a, err := quorum.New(clientsOf(bedtest.RedisClients(t, bed)), append(slices.Clone(opts), quorum.WithObserver(failedA))...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = a.Close() })
			b, err := quorum.New(clientsOf(bedtest.RedisClients(t, bed)), opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
			if guard {
				trustBed(t, ctx, bed)
			}
			// Open both lockers' connections and load the script on every
			// node, so the staged calls below are not first calls.
			waitLockable(t, ctx, a)
			waitLockable(t, ctx, b)
			// A wins exactly nodes 0, 1, 2 while 3 and 4 are cut off.
			for _, n := range bed.Redis[3:] {
				if err := n.Partition(ctx); err != nil {
					t.Fatal(err)
				}
			}
			leaseA, err := a.Lock(ctx, "guarded:counter")
			if err != nil {
				t.Fatalf("A: %v", err)
			}
			fromA := time.Now()
			// A's requests to 3 and 4 end at their deadline. Healed before
			// then, a request still queued on a loaded machine would reach
			// its node and set A's token there too.
			failedA.await(t, ctx, 3, 4)
			for _, n := range bed.Redis[3:] {
				if err := n.Heal(ctx); err != nil {
					t.Fatal(err)
				}
			}
			// Node 2 comes back without the key.
			if err := bed.Redis[2].Restart(ctx, false); err != nil {
				t.Fatal(err)
			}
			// B tries until it wins, for a few seconds at most, and never
			// starts an attempt that could end after A's lease: every answer
			// B gets from nodes 0 and 1 comes while they still hold A's key.
			stopB := time.Now().Add(6 * time.Second)
			if last := leaseA.Until().Add(-nodeTimeout); last.Before(stopB) {
				stopB = last
			}
			var leaseB lease.Lease
			var errB error
			triesB := 0
			for {
				triesB++
				leaseB, errB = b.TryLock(ctx, "guarded:counter")
				if errB == nil || !time.Now().Add(50*time.Millisecond).Before(stopB) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			var holds []checker.Hold
			if errB == nil {
				holds = append(holds, checker.Hold{Key: "guarded:counter", Holder: "B", Fence: leaseB.Fence(), From: time.Now(), To: leaseB.Until()})
			}
			holds = append(holds, checker.Hold{Key: "guarded:counter", Holder: "A", Fence: leaseA.Fence(), From: fromA, To: leaseA.Until()})
			verdict := checker.Exclusion(holds)
			t.Logf("guard=%v: B after %d attempts: %v; exclusion: %v", guard, triesB, errB, verdict)

			if guard {
				if errB == nil {
					t.Fatal("the amnesia guard let B win while A still held the lock")
				}
				if !verdict.OK() {
					t.Fatalf("checker: %v", verdict)
				}
				return
			}
			// Negative control: the double grant happened and is caught.
			if errB != nil {
				t.Fatalf("without the guard B should have won nodes 2, 3, 4: %v", errB)
			}
			if verdict.OK() {
				t.Fatal("the checker missed two holders at once")
			}
			// The lock was lost, the fenced write was not: B (newer fence)
			// writes, then A's late write is rejected.
			if leaseB.Fence() <= leaseA.Fence() {
				t.Fatalf("fences not increasing: A %d, B %d", leaseA.Fence(), leaseB.Fence())
			}
			if err := res.write(ctx, leaseB.Fence(), "B"); err != nil {
				t.Fatalf("B's write: %v", err)
			}
			if err := res.write(ctx, leaseA.Fence(), "A"); !errors.Is(err, fencing.ErrStaleFence) {
				t.Fatalf("A's late write: got %v, want ErrStaleFence", err)
			}
			if v := checker.Fencing(res.accepted(t, ctx)); !v.OK() || v.Checked != 1 {
				t.Fatalf("fencing verdict: %v", v)
			}
		})
	}
}

// acquireFailures is an Observer that hears, for one key, how many
// attempts each acquisition made and which node requests failed.
type acquireFailures struct {
	lease.NopObserver
	key      string
	attempts chan int
	failed   chan int
}

func newAcquireFailures(key string) *acquireFailures {
	return &acquireFailures{key: key, attempts: make(chan int, 16), failed: make(chan int, 256)}
}

// ObserveAcquire hears the number of attempts of an acquisition.
func (o *acquireFailures) ObserveAcquire(e lease.AcquireEvent) {
	if e.Key == o.key {
		select {
		case o.attempts <- e.Attempts:
		default:
		}
	}
}

// ObserveNodeError hears a failed acquire request on a node.
func (o *acquireFailures) ObserveNodeError(e lease.NodeEvent) {
	if e.Key == o.key && e.Op == quorum.OpAcquire.String() {
		select {
		case o.failed <- e.Node:
		default:
		}
	}
}

// await waits until every attempt of the acquisition just made has failed
// on each of nodes, so none of its requests can still reach them.
func (o *acquireFailures) await(t *testing.T, ctx context.Context, nodes ...int) {
	t.Helper()
	var attempts int
	select {
	case attempts = <-o.attempts:
	case <-ctx.Done():
		t.Fatalf("no acquisition of %s was observed: %v", o.key, ctx.Err())
	}
	seen := make(map[int]int)
	for slices.ContainsFunc(nodes, func(n int) bool { return seen[n] < attempts }) {
		select {
		case n := <-o.failed:
			seen[n]++
		case <-ctx.Done():
			t.Fatalf("after %d attempts, failures seen per node %v, want each of %v: %v", attempts, seen, nodes, ctx.Err())
		}
	}
}

// waitLockable retries one lock until the fresh nodes have left their
// amnesia window.
func waitLockable(t *testing.T, ctx context.Context, l *quorum.Locker) {
	t.Helper()
	deadline := time.Now().Add(l.TTL()*3 + 5*time.Second)
	for {
		le, err := l.TryLock(ctx, "integration:warm")
		if err == nil {
			_ = le.Unlock(ctx)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lock never became available: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// trustBed vouches for every node of a bed that has never held a lock, as
// an operator does on new nodes, so the test need not wait out the restart
// window. The trust ends at a node's next restart.
func trustBed(t *testing.T, ctx context.Context, bed *testbed.Bed) {
	t.Helper()
	for _, n := range bed.Redis {
		c := n.Admin()
		err := quorum.TrustNode(ctx, c)
		_ = c.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
}
