package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
)

// TestParsePrimitives: semaphore-P, semaphore-P-W, rw-R-W and election
// parse to their shape, malformed names are refused naming them, the
// defaults end with them, and -only names the counter semaphore.
func TestParsePrimitives(t *testing.T) {
	for _, tc := range []struct {
		name                      string
		kind                      kind
		permits, workers, readPct int
	}{
		{"semaphore-8", kindSemaphore, 8, semaphoreWorkers, 0},
		{"semaphore-1", kindSemaphore, 1, semaphoreWorkers, 0},
		{"semaphore-1024-1", kindSemaphore, maxPermits, 1, 0},
		{"semaphore-4-64", kindSemaphore, 4, 64, 0},
		{"rw-90-10", kindRW, 0, rwWorkers, 90},
		{"rw-0-100", kindRW, 0, rwWorkers, 0},
		{"rw-100-0", kindRW, 0, rwWorkers, 100},
		{"election", kindElection, 0, electionCandidates, 0},
	} {
		sc, err := parseScenario(tc.name)
		if err != nil || sc.name != tc.name || sc.kind != tc.kind || sc.permits != tc.permits || sc.workers != tc.workers || sc.readPct != tc.readPct ||
			!sc.primitive() || sc.fault() || sc.contended() {
			t.Errorf("parseScenario(%q) = %+v, %v", tc.name, sc, err)
		}
		if tc.kind != kindElection && sc.hold != primitiveHold {
			t.Errorf("parseScenario(%q): hold %v", tc.name, sc.hold)
		}
	}
	for _, name := range []string{
		"semaphore", "semaphore-", "semaphore-0", "semaphore-1025", "semaphore-08", "semaphore-x", "semaphore-8-0", "semaphore-8-1025",
		"semaphore-8-32-1", "semaphore-8-", "semaphore--8", "semaphore-+8",
		"rw", "rw-", "rw-90", "rw-90-", "rw-90-20", "rw-101--1", "rw-090-10", "rw-90-010", "rw-x-y", "rw-90-10-0", "rw--10-110",
		"election-3", "Election", "elections",
	} {
		if _, err := parseScenario(name); err == nil || !strings.Contains(err.Error(), "semaphore-P-W") || !strings.Contains(err.Error(), "rw-R-W") {
			t.Errorf("parseScenario(%q): %v, want an unknown-scenario error naming the primitive scenarios", name, err)
		}
	}
	if n := len(defaultScenarios); n < 3 || !slices.Equal(defaultScenarios[n-3:], []string{"semaphore-8", "rw-90-10", "election"}) {
		t.Errorf("default scenarios %q do not end with the primitive ones", defaultScenarios)
	}
	for k, want := range map[kind]string{kindSemaphore: "semaphore", kindRW: "rw", kindElection: "election"} {
		if k.String() != want {
			t.Errorf("kind %d is named %q, want %q", int(k), k, want)
		}
	}
	c, err := parse([]string{"-only", "quorumlock,counter-semaphore", "-scenarios", "semaphore-2-4,rw-50-50,election"})
	if err != nil || !c.wants(nameCounterSem) || c.wants(nameSingle) || len(c.scenarios) != 3 || c.scenarios[0].permits != 2 {
		t.Fatalf("parse: %+v %v", c, err)
	}
	if c, err := parse(nil); err != nil || !c.wants(nameCounterSem) {
		t.Fatalf("counter-semaphore does not run by default: %+v %v", c.only, err)
	}
	for _, args := range [][]string{{"-scenarios", "semaphore-8,semaphore-8"}, {"-only", "counter-sem"}, {"-scenarios", "rw-90-9"}} {
		if _, err := parse(args); err == nil {
			t.Errorf("parse(%q) accepted", args)
		}
	}
}

// TestOccupancy: the most holders seen, and the read-write guard's
// overlaps.
func TestOccupancy(t *testing.T) {
	var o occupancy
	if o.enter() != 1 || o.enter() != 2 {
		t.Fatal("enter does not count")
	}
	o.leave()
	if o.enter() != 2 || o.most.Load() != 2 {
		t.Fatalf("now %d, most %d", o.now.Load(), o.most.Load())
	}
	var g rwGuard
	g.enter(true)
	g.enter(true)
	if g.overlaps.Load() != 0 || g.readers.most.Load() != 2 {
		t.Fatal("two readers overlap")
	}
	g.enter(false) // a writer beside readers
	g.leave(true)
	g.leave(true)
	g.enter(false) // a second writer
	g.leave(false)
	g.leave(false)
	g.enter(false) // alone: fine
	g.enter(true)  // a reader beside the writer
	if got := g.overlaps.Load(); got != 3 || g.writers.most.Load() != 2 {
		t.Fatalf("overlaps %d, most writers %d; want 3, 2", got, g.writers.most.Load())
	}
	c := &counted{h: nothingHeld{}, o: &o}
	if err := c.Unlock(context.Background()); err != nil || c.Unlock(context.Background()) != nil || o.now.Load() != 1 {
		t.Fatalf("a counted release counts out once: now %d", o.now.Load())
	}
}

// TestMemFencer: strictly increasing per key, under concurrent calls.
func TestMemFencer(t *testing.T) {
	f := &memFencer{}
	var (
		mu  sync.Mutex
		got = map[string][]int64{}
		wg  sync.WaitGroup
	)
	for w := range 8 {
		wg.Go(func() {
			key := []string{"a", "b"}[w%2]
			for range 50 {
				n, err := f.Next(context.Background(), key)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				got[key] = append(got[key], n)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for key, ns := range got {
		slices.Sort(ns)
		if len(ns) != 200 || ns[0] != 1 || ns[199] != 200 || len(slices.Compact(ns)) != 200 {
			t.Errorf("key %s: tokens %v", key, ns)
		}
	}
	if termRange(nil) != "n/a" || termRange([]int64{1, 1}) != "1" || termRange([]int64{3, 1, 2}) != "1..3" {
		t.Error("termRange")
	}
}

// TestSingleSemScript runs the single-node semaphore's script on its own
// against a real server: it admits permits holders, refuses the next,
// admits again once one leaves, and drops an expired holder first.
func TestSingleSemScript(t *testing.T) {
	c := bedtest.RedisClients(t, bedtest.Start(t, testbed.Options{Redis: 1}))[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := newSingleSem(c, "sem", 2, time.Minute)
	a, errA := s.tryAcquire(ctx)
	_, errB := s.tryAcquire(ctx)
	if errA != nil || errB != nil {
		t.Fatalf("two permits: %v, %v", errA, errB)
	}
	if _, err := s.tryAcquire(ctx); !errors.Is(err, errFull) {
		t.Fatalf("a third holder: %v, want errFull", err)
	}
	if pttl := c.PTTL(ctx, "sem").Val(); pttl <= 0 || pttl > time.Minute {
		t.Fatalf("the set's PTTL %v", pttl)
	}
	if _, err := s.acquire(ctx, 50*time.Millisecond); !errors.Is(err, errFull) {
		t.Fatalf("a waiting acquire on a full semaphore: %v, want errFull", err)
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Unlock(ctx); err == nil {
		t.Fatal("a second release was confirmed")
	}
	c3, err := s.tryAcquire(ctx)
	if err != nil {
		t.Fatalf("refused after a release: %v", err)
	}
	// An expired holder (its score in the past) is dropped before the count.
	if err := c.ZAdd(ctx, "sem", redis.Z{Score: 1, Member: c3.(singleSemHeld).token}).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.tryAcquire(ctx); err != nil {
		t.Fatalf("refused beside an expired holder: %v", err)
	}
	if n := c.ZCard(ctx, "sem").Val(); n != 2 {
		t.Fatalf("%d holders, want 2", n)
	}
}

// TestRunPrimitives runs the three primitive scenarios end to end, small,
// on the bed lockbench starts: every contender acquires with no error and
// no holder too many (but the counter semaphore, whose holders are not
// checked), the read-write locks see no overlap, and every election
// contender sees a new leader with a greater term; the tables, the JSON
// and the plot hold them.
func TestRunPrimitives(t *testing.T) {
	if os.Getenv(testbed.EnvProvider) == "" {
		t.Setenv(testbed.EnvProvider, testbed.ProviderLocal)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	jsonPath, plotPath := filepath.Join(dir, "out.json"), filepath.Join(dir, "out.png")
	var out strings.Builder
	err := run(ctx, []string{"-rounds", "1", "-hot-duration", "300ms", "-scenarios", "semaphore-2-6,rw-90-10,election",
		"-past-window=false", "-json", jsonPath, "-plot", plotPath, "-quiet"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	report := out.String()
	checkPrimitiveTables(t, report)
	if t.Failed() {
		t.Fatalf("report:\n%s", report)
	}
	checkPrimitiveJSON(t, jsonPath)
	checkPNG(t, plotPath)
}

// checkPrimitiveTables checks the tables TestRunPrimitives printed.
func checkPrimitiveTables(t *testing.T, report string) {
	t.Helper()
	sem := tableRows(t, report, "semaphore-2-6")
	for _, name := range []string{nameQuorum, nameEtcd, nameSingle} {
		// acquisitions/s, errors, max holders.
		if r, ok := sem[name]; !ok || len(r) != 8 || r[1] == "0" || r[5] != "0" || (r[6] != "1" && r[6] != "2") {
			t.Errorf("semaphore: %s missing, idle, with errors or too many holders: %q", name, r)
		}
	}
	if r, ok := sem[nameCounterSem+" (UNSAFE scheme)"]; !ok || r[1] == "0" {
		t.Errorf("semaphore: the counter semaphore missing or idle: %q", r)
	}
	// A short round on a loaded machine may see only reads or only writes
	// (a waiting writer stops new readers), so only one kind must move.
	rw := tableRows(t, report, "rw-90-10")
	for _, name := range []string{nameQuorum, nameEtcd} {
		// reads/s, writes/s, max writers, overlaps, errors.
		if r, ok := rw[name]; !ok || len(r) != 10 || (r[1] == "0" && r[2] == "0") || (r[7] != "0" && r[7] != "1") || r[8] != "0" || r[9] != "0" {
			t.Errorf("rw: %s missing, idle, overlapping or with errors: %q", name, r)
		}
	}
	el := tableRows(t, report, "election")
	for _, name := range []string{nameQuorum, nameEtcd, nameEtcdCrash} {
		// kills measured, term increase, errors.
		if r, ok := el[name]; !ok || len(r) != 6 || r[1] != "1" || r[4] == "n/a" || r[5] != "0" {
			t.Errorf("election: %s missing or with errors: %q", name, r)
		}
	}
}

// checkPrimitiveJSON checks the figures TestRunPrimitives wrote to path.
func checkPrimitiveJSON(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got runJSON
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("JSON: %v\n%s", err, b)
	}
	if len(got.Scenarios) != 3 {
		t.Fatalf("JSON: %d scenarios", len(got.Scenarios))
	}
	sem, rw, el := got.Scenarios[0], got.Scenarios[1], got.Scenarios[2]
	if sem.Kind != "semaphore" || sem.Permits != 2 || sem.Workers != 6 || len(sem.Semaphore) != 4 || len(sem.Contenders) != 0 {
		t.Errorf("JSON: %+v", sem)
	}
	for _, s := range sem.Semaphore {
		if s.Acquisitions == 0 || s.Wait.Count != s.Acquisitions || len(s.MaxHoldersPerRound) != 1 || s.Unsafe != (s.Name == nameCounterSem) {
			t.Errorf("JSON: semaphore %+v", s)
		}
	}
	if rw.Kind != "rw" || rw.ReadPercent == nil || *rw.ReadPercent != 90 || len(rw.RW) != 2 {
		t.Errorf("JSON: %+v", rw)
	}
	for _, j := range rw.RW {
		if j.Reads.Ops+j.Writes.Ops == 0 || j.Overlaps != 0 || j.MaxWriters > 1 || len(j.MinSharePerRound) != 1 {
			t.Errorf("JSON: rw %+v", j)
		}
	}
	if el.Kind != "election" || len(el.Election) != 3 {
		t.Errorf("JSON: %+v", el)
	}
	for _, j := range el.Election {
		if j.Kills != 1 || len(j.FailoversNs) != 1 || j.FailoversNs[0] <= 0 || len(j.TermIncrease) != 1 || j.TermIncrease[0] < 1 || j.Kill == "" {
			t.Errorf("JSON: election %+v", j)
		}
	}
}
