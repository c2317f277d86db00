package testbed_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
)

// startGroup starts a bed with a Postgres HA group, on the provider
// QUORUMLOCK_TESTBED names, and logs how long the start took.
func startGroup(t *testing.T) (*testbed.Bed, *testbed.PostgresGroup) {
	t.Helper()
	start := time.Now()
	b := bedtest.Start(t, testbed.Options{PostgresHA: true})
	t.Logf("the group started on %s in %v", b.Provider, time.Since(start).Round(time.Millisecond))
	g := b.PostgresHA
	t.Cleanup(func() {
		if t.Failed() {
			logGroup(t, g)
		}
	})
	return b, g
}

// logGroup logs the monitor's last events and the end of each data
// node's log, for a failed test.
func logGroup(t *testing.T, g *testbed.PostgresGroup) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	events, err := g.Events(ctx, 40)
	if err != nil {
		t.Logf("the monitor's events: %v", err)
	}
	for _, e := range events {
		t.Logf("event: %s", e)
	}
	for _, n := range g.Nodes {
		b, err := os.ReadFile(filepath.Join(n.Dir(), "pg_autoctl.log"))
		if err != nil {
			t.Logf("%s: %v", n.Name(), err)
			continue
		}
		t.Logf("%s's log ends with:\n%s", n.Name(), b[max(0, len(b)-6000):])
	}
}

// TestPostgresHA: a commit through the group's URI is on both data nodes;
// a killed primary is replaced by its standby, and comes back as a
// standby that refuses writes; a switchover swaps the roles back; Close
// leaves no process behind.
func TestPostgresHA(t *testing.T) {
	b, g := startGroup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	mustExec(t, ctx, g.URI(), "CREATE TABLE t (id int PRIMARY KEY)")
	// remote_apply: the commit returns once the standby has applied it,
	// so the standby can be read at once.
	mustExec(t, ctx, g.URI(), "SET synchronous_commit = remote_apply; INSERT INTO t VALUES (1)")
	for _, n := range g.Nodes {
		if got := count(t, ctx, n.DSN(), 1); got != 1 {
			t.Fatalf("%s has %d rows with id 1, want 1", n.Name(), got)
		}
	}

	primary := mustPrimary(t, ctx, g)
	standby := other(g, primary)
	took := killAndWrite(t, ctx, g, primary, 2)
	t.Logf("%s killed: the first write through the URI succeeded after %v", primary.Name(), took.Round(time.Millisecond))
	// The bed's timeouts aim at 15 s (13 s measured on an idle machine);
	// the bound leaves room for a loaded one.
	if took > 20*time.Second {
		t.Errorf("the first write after the kill took %v, want at most 20 s", took)
	}
	if p := mustPrimary(t, ctx, g); p != standby {
		t.Fatalf("the primary is %s, want %s", p.Name(), standby.Name())
	}

	if err := primary.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.WaitSteady(ctx); err != nil {
		t.Fatal(err)
	}
	// Applied on the standby, this commit follows the one of id 2 there.
	mustExec(t, ctx, g.URI(), "SET synchronous_commit = remote_apply; INSERT INTO t VALUES (7)")
	if got := count(t, ctx, primary.DSN(), 2); got != 1 {
		t.Fatalf("the restarted %s has %d rows with id 2, want 1", primary.Name(), got)
	}
	err := execErr(ctx, primary.DSN(), "INSERT INTO t VALUES (3)")
	if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "25006" {
		t.Fatalf("a write on the restarted former primary: %v, want read_only_sql_transaction (25006)", err)
	}

	if err := g.Switchover(ctx); err != nil {
		t.Fatal(err)
	}
	if p := mustPrimary(t, ctx, g); p != primary {
		t.Fatalf("after the switchover the primary is %s, want %s", p.Name(), primary.Name())
	}
	mustExec(t, ctx, g.URI(), "SET synchronous_commit = remote_apply; INSERT INTO t VALUES (4)")
	if got := count(t, ctx, standby.DSN(), 4); got != 1 {
		t.Fatalf("%s, the standby again, has %d rows with id 4, want 1", standby.Name(), got)
	}

	pauseResume(t, ctx, g, primary)

	procs := groupProcs(t, g)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if left := procs.alive(); len(left) > 0 {
		t.Fatalf("after Close %d of the group's %d processes remain: %v", len(left), len(procs), left)
	}
}

// pauseResume: a write on the paused primary n does not complete; once
// n is resumed, writes through the URI succeed. The pause is kept short,
// under what would start a failover.
func pauseResume(t *testing.T, ctx context.Context, g *testbed.PostgresGroup, n *testbed.PostgresHANode) {
	t.Helper()
	if err := n.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err := execErr(actx, n.DSN(), "INSERT INTO t VALUES (5)")
	cancel()
	if rerr := n.Resume(ctx); rerr != nil {
		t.Fatal(rerr)
	}
	if err == nil {
		t.Fatalf("a write on the paused %s succeeded", n.Name())
	}
	mustExec(t, ctx, g.URI(), "INSERT INTO t VALUES (6)")
}

// killAndWrite kills node n and returns how long it took until a write
// through the group's URI succeeded, trying every 100 ms with attempts of
// at most 2 s, for at most a minute.
func killAndWrite(t *testing.T, ctx context.Context, g *testbed.PostgresGroup, n *testbed.PostgresHANode, id int) time.Duration {
	t.Helper()
	start := time.Now()
	if err := n.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	insert := fmt.Sprintf("INSERT INTO t VALUES (%d) ON CONFLICT DO NOTHING", id)
	var last error
	for {
		actx, acancel := context.WithTimeout(wctx, 2*time.Second)
		last = execErr(actx, g.URI(), insert)
		acancel()
		if last == nil {
			return time.Since(start)
		}
		select {
		case <-wctx.Done():
			t.Fatalf("no write through the URI within a minute of the kill: %v", last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// mustPrimary waits up to 10 s for the monitor to report a primary.
func mustPrimary(t *testing.T, ctx context.Context, g *testbed.PostgresGroup) *testbed.PostgresHANode {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	p, err := g.WaitPrimary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func other(g *testbed.PostgresGroup, n *testbed.PostgresHANode) *testbed.PostgresHANode {
	if g.Nodes[0] == n {
		return g.Nodes[1]
	}
	return g.Nodes[0]
}

func mustExec(t *testing.T, ctx context.Context, dsn, sql string) {
	t.Helper()
	if err := execErr(ctx, dsn, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func execErr(ctx context.Context, dsn, sql string) error {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	_, err = c.Exec(ctx, sql)
	return err
}

// count returns how many rows of t have the given id, on the node at dsn.
func count(t *testing.T, ctx context.Context, dsn string, id int) int {
	t.Helper()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM t WHERE id = $1", id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// procSet maps process ids to their start times (field 22 of
// /proc/<pid>/stat), so that a reused id is not mistaken for the same
// process.
type procSet map[int]string

// groupProcs lists the processes of the group: those whose command line
// names a data node's or the monitor's directory (the pg_autoctl services
// and the postmasters), and every process below them.
func groupProcs(t *testing.T, g *testbed.PostgresGroup) procSet {
	t.Helper()
	dir := filepath.Dir(g.Nodes[0].Dir())
	stats, parents := readProcs()
	set := procSet{}
	for pid := range stats {
		if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && bytes.Contains(cmd, []byte(dir)) {
			set[pid] = stats[pid]
		}
	}
	for grew := true; grew; {
		grew = false
		for pid, ppid := range parents {
			if _, in := set[pid]; !in {
				if _, parentIn := set[ppid]; parentIn {
					set[pid], grew = stats[pid], true
				}
			}
		}
	}
	if len(set) < 10 {
		t.Fatalf("found %d processes of the group under %s, want at least 10 (three services and their Postgres)", len(set), dir)
	}
	return set
}

// alive returns the processes of s that still exist, zombies aside.
func (s procSet) alive() []int {
	stats, _ := readProcs()
	var left []int
	for pid, start := range s {
		if stats[pid] == start {
			left = append(left, pid)
		}
	}
	return left
}

// readProcs reads every process's start time and parent from /proc,
// zombies left out.
func readProcs() (stats map[int]string, parents map[int]int) {
	stats, parents = map[int]string{}, map[int]int{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		stats[pid], parents[pid] = f[19], ppid
	}
	return stats, parents
}

// TestPostgresHAPartition: a primary cut off from the monitor and its
// standby stops taking writes (its keeper demotes it) before the monitor
// promotes the standby, acknowledges no write meanwhile, and comes back as
// the standby once healed.
//
// It runs in make chaos only: in one CI run under load, the cut-off
// primary's keeper still saw its standby when it lost the monitor, kept
// going, and was not demoted within a minute (its commits could not
// complete without the standby, so none was acknowledged).
func TestPostgresHAPartition(t *testing.T) {
	if !longHA {
		t.Skip("not reliable under load yet (a cut-off primary may not demote itself): make chaos runs it, with -tags chaos")
	}
	_, g := startGroup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	mustExec(t, ctx, g.URI(), "CREATE TABLE t (id int PRIMARY KEY)")
	primary := mustPrimary(t, ctx, g)
	standby := other(g, primary)
	watch, err := primary.Link("watch")
	if err != nil {
		t.Fatal(err)
	}
	direct := strings.Replace(primary.DSN(), primary.Addr(), watch.Addr(), 1)

	start := time.Now()
	if err := primary.Partition(ctx); err != nil {
		t.Fatal(err)
	}
	demoted := make(chan time.Duration, 1)
	go func() { demoted <- untilNoWrites(t, ctx, direct, start) }()
	promoted := untilWrite(t, ctx, g.URI(), start)
	stopped := <-demoted
	t.Logf("%s partitioned: it stopped taking writes after %v; a write through the URI succeeded after %v",
		primary.Name(), stopped.Round(time.Millisecond), promoted.Round(time.Millisecond))
	if stopped >= promoted {
		t.Fatalf("the isolated primary stopped taking writes after %v, not before the standby was promoted (%v)", stopped, promoted)
	}
	if p := mustPrimary(t, ctx, g); p != standby {
		t.Fatalf("the primary is %s, want %s", p.Name(), standby.Name())
	}

	if err := primary.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.WaitSteady(ctx); err != nil {
		t.Fatal(err)
	}
	if p := mustPrimary(t, ctx, g); p != standby {
		t.Fatalf("after the heal the primary is %s, want %s", p.Name(), standby.Name())
	}
	partitionStandby(t, ctx, g, primary, direct)
}

// partitionStandby: with the standby n cut off, the primary takes writes
// again once the monitor has dropped the synchronous standby, and n, which
// its test reads at direct, bypassing the partition, receives none of them
// until it is healed.
func partitionStandby(t *testing.T, ctx context.Context, g *testbed.PostgresGroup, n *testbed.PostgresHANode, direct string) {
	t.Helper()
	start := time.Now()
	if err := n.Partition(ctx); err != nil {
		t.Fatal(err)
	}
	took := untilWrite(t, ctx, g.URI(), start)
	t.Logf("standby %s partitioned: writes through the URI resumed after %v", n.Name(), took.Round(time.Millisecond))
	mustExec(t, ctx, g.URI(), "INSERT INTO t VALUES (-1)")
	// Nothing is to happen: a bounded watch, 3 s, many times what a
	// commit takes to reach a connected standby.
	for range 30 {
		if got := count(t, ctx, direct, -1); got != 0 {
			t.Fatalf("the partitioned standby %s received a commit made during its partition", n.Name())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := n.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.WaitSteady(ctx); err != nil {
		t.Fatal(err)
	}
	mustExec(t, ctx, g.URI(), "SET synchronous_commit = remote_apply; INSERT INTO t VALUES (-2)")
	if got := count(t, ctx, direct, -1); got != 1 {
		t.Fatalf("the healed standby %s has %d rows with id -1, want 1", n.Name(), got)
	}
}

// untilNoWrites writes on one node at dsn every 100 ms, each attempt with
// 1 s, until one fails at once (the node is down or read-only), and returns
// how long after start that was. A write that succeeds fails the test: the
// node is cut off from its synchronous standby, so no commit may return.
func untilNoWrites(t *testing.T, ctx context.Context, dsn string, start time.Time) time.Duration {
	for i := 0; ; i++ {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		err := execErr(actx, dsn, fmt.Sprintf("INSERT INTO t VALUES (%d)", 1000+i))
		hung := actx.Err() != nil
		cancel()
		if err == nil {
			t.Errorf("the isolated primary acknowledged a write %v after the partition", time.Since(start))
			return time.Since(start)
		}
		if !hung {
			return time.Since(start)
		}
		if ctx.Err() != nil {
			t.Errorf("the isolated primary still takes writes: %v", err)
			return time.Since(start)
		}
	}
}

// untilWrite writes through dsn every 100 ms, each attempt with at most
// 5 s, until one succeeds, for at most a minute, and returns how long
// after start that was.
func untilWrite(t *testing.T, ctx context.Context, dsn string, start time.Time) time.Duration {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for i := 0; ; i++ {
		actx, acancel := context.WithTimeout(wctx, 5*time.Second)
		err := execErr(actx, dsn, fmt.Sprintf("INSERT INTO t VALUES (%d)", 100+i))
		acancel()
		if err == nil {
			return time.Since(start)
		}
		select {
		case <-wctx.Done():
			t.Fatalf("no write through the URI within a minute: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
