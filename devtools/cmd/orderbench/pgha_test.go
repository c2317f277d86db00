package main

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParsePostgres(t *testing.T) {
	c, err := parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.postgres, []string{pgSingle}) || c.haClients != haViaProxy || c.cpuSplit || c.usesHA() || !c.usesSingle() {
		t.Fatalf("defaults: %+v", c)
	}
	c, err = parse([]string{"-postgres", "both", "-ha-clients", "direct", "-cpu-split"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.postgres, []string{pgSingle, pgHA}) || c.haClients != haDirect || !c.cpuSplit || !c.usesHA() || !c.usesSingle() {
		t.Fatalf("parsed: %+v", c)
	}
	c, err = parse([]string{"-postgres", "ha"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.postgres, []string{pgHA}) || c.usesSingle() {
		t.Fatalf("parsed: %+v", c)
	}
	for _, tc := range []struct {
		args    []string
		mention string
	}{
		{[]string{"-postgres", "double"}, "-postgres"},
		{[]string{"-postgres", ""}, "-postgres"},
		{[]string{"-postgres", "single,ha"}, "-postgres"},
		{[]string{"-ha-clients", "tunnel"}, "-ha-clients"},
		{[]string{"-cpu-split", "-cpuprofile", "x.prof"}, "-cpu-split"},
	} {
		if _, err := parse(tc.args); err == nil || !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("parse(%q) = %v, want an error naming %s", tc.args, err, tc.mention)
		}
	}
}

// TestPlansOnBothDatabases: with -postgres both every run is made on the
// single Postgres and then on the HA group, with users of its own.
func TestPlansOnBothDatabases(t *testing.T) {
	c, err := parse([]string{"-scenarios", "hot,flash", "-modes", "lock,db", "-backends", "redlock", "-clients", "8", "-postgres", "both"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range c.plans() {
		got = append(got, p.title()+" "+p.tag())
	}
	want := []string{"hot/8/lock/redlock lock-redlock", "hot/8/lock/redlock on ha lock-redlock-ha", "hot/8/db db", "hot/8/db on ha db-ha",
		"flash/lock/redlock lock-redlock", "flash/lock/redlock on ha lock-redlock-ha", "flash/db db", "flash/db on ha db-ha"}
	if !slices.Equal(got, want) {
		t.Fatalf("plans: %q, want %q", got, want)
	}
}

func TestDatabaseURLs(t *testing.T) {
	multi := "postgres://u:p%40ss@127.0.0.2:5001,127.0.0.2:5002/main?target_session_attrs=read-write&sslmode=disable"
	got, err := withDatabase(multi, "orderbench_1")
	if want := "postgres://u:p%40ss@127.0.0.2:5001,127.0.0.2:5002/orderbench_1?target_session_attrs=read-write&sslmode=disable"; err != nil || got != want {
		t.Fatalf("withDatabase = %q, %v; want %q", got, err, want)
	}
	if got, err := withDatabase("postgres://127.0.0.1:5432", "db"); err != nil || got != "postgres://127.0.0.1:5432/db" {
		t.Fatalf("withDatabase without a path = %q, %v", got, err)
	}
	got, err = replaceHosts(multi, map[string]string{"127.0.0.2:5001": "127.0.0.1:5001", "127.0.0.2:5002": "127.0.0.1:5002"})
	if want := "postgres://u:p%40ss@127.0.0.1:5001,127.0.0.1:5002/main?target_session_attrs=read-write&sslmode=disable"; err != nil || got != want {
		t.Fatalf("replaceHosts = %q, %v; want %q", got, err, want)
	}
	// A port that starts like another one's is not replaced.
	if _, err := replaceHosts(multi, map[string]string{"127.0.0.2:500": "x"}); err == nil {
		t.Fatal("replaceHosts replaced a host that is not there")
	}
	if _, err := withDatabase("host=x dbname=y", "z"); err == nil {
		t.Fatal("withDatabase took a key=value DSN")
	}
	if got := redactURL(multi); got != "postgres://u:xxxxx@127.0.0.2:5001,127.0.0.2:5002/main?target_session_attrs=read-write&sslmode=disable" {
		t.Fatalf("redactURL = %q", got)
	}
	if got := redactURL("postgres://u@h/db"); got != "postgres://u@h/db" {
		t.Fatalf("redactURL without a password = %q", got)
	}
}

// haSummary is a summary of runs on both databases: distinct/64 in both
// modes on each, the HA group's primary changed during its lock run.
func haSummary(t *testing.T) summaryJSON {
	t.Helper()
	cfg, err := parse([]string{"-scenarios", "distinct", "-clients", "64", "-backends", "redlock", "-postgres", "both", "-ha-clients", "direct"})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	w := window{start: start, end: start.Add(2 * time.Second)}
	tal := func(created int) []*tally {
		return []*tally{{inWindow: map[string]int{"201": created}, created: created, latencies: []time.Duration{time.Millisecond}}}
	}
	run := func(mode, backend, where string, created int) *runResult {
		r := &runResult{runPlan: runPlan{scenario: scenarioDistinct, clients: 64, mode: mode, backend: backend, postgres: where},
			window: w, tallies: tal(created), check: checkResult{OK: true}}
		if where == pgHA {
			r.primaryBefore, r.primaryAfter = "pgha1", "pgha1"
		}
		return r
	}
	res := []*runResult{run(modeLock, backendRedlock, pgSingle, 400), run(modeLock, backendRedlock, pgHA, 300),
		run(modeDB, "", pgSingle, 200), run(modeDB, "", pgHA, 100)}
	res[1].primaryAfter = "pgha2"
	s := summarize(cfg, "test", "abcd", res)
	s.HA = &haJSON{Clients: haDirect, URI: "postgres://u:xxxxx@h1,h2/db", PrimaryAtStart: "pgha1", PrimaryAtEnd: "pgha2",
		EventsDuring: []eventJSON{{Time: start, Node: "pgha1", Reported: "primary", Assigned: "draining", Description: "failover"}}}
	return s
}

func TestComparePostgres(t *testing.T) {
	s := haSummary(t)
	if len(s.Comparisons) != 2 || s.Comparisons[0].Postgres != pgSingle || s.Comparisons[1].Postgres != pgHA ||
		*s.Comparisons[0].Ratio != 2 || *s.Comparisons[1].Ratio != 3 {
		t.Fatalf("comparisons: %+v", s.Comparisons)
	}
	if len(s.Postgres) != 2 || s.Postgres[0].Mode != modeLock || *s.Postgres[0].HAOverSingle != 0.75 || *s.Postgres[1].HAOverSingle != 0.5 {
		t.Fatalf("postgres comparisons: %+v", s.Postgres)
	}
	var out strings.Builder
	report(&out, s)
	for _, want := range []string{"| distinct/64 | lock/redlock on ha | 150 | 150 |", "| distinct/64 | db | 100 | 100 |",
		"- distinct/64 on ha: lock/redlock placed orders 3.00x as fast as db (lock/redlock 150, db 50 orders/s)",
		"| distinct/64 | lock/redlock | 200 | 100 | 2.00x | 150 | 50 | 3.00x | 0.75x | 0.50x |",
		"at the nodes' own addresses (postgres://u:xxxxx@h1,h2/db); primary before the first run pgha1, after the last pgha2",
		"The monitor logged 1 events during the runs:", "pgha1 primary/draining: failover",
		"distinct/64/lock/redlock on ha: the primary was pgha1 before the run and pgha2 after it."} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "distinct/64/db on ha: the primary") {
		t.Errorf("a run whose primary stayed is reported:\n%s", out.String())
	}
}

// TestRunHAEndToEnd runs distinct and cart, tiny, in both modes on the
// single Postgres and on the HA group, with the CPU split: every run
// places orders and passes its check, the group keeps its primary, and
// each run's split counts the database it ran on.
func TestRunHAEndToEnd(t *testing.T) {
	useLocalBed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	jsonPath := filepath.Join(t.TempDir(), "out.json")
	var out strings.Builder
	err := run(ctx, []string{"-scenarios", "distinct,cart", "-clients", "4", "-duration", "500ms", "-warmup", "200ms", "-backends", "redlock",
		"-postgres", "both", "-ha-clients", "direct", "-cpu-split", "-json", jsonPath, "-quiet"}, &out)
	t.Log("\n" + out.String())
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("no HA group on this machine: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	s := readSummary(t, jsonPath)
	if len(s.Runs) != 8 || len(s.Postgres) != 4 || s.HA == nil || s.HA.PrimaryAtStart == "" || s.HA.PrimaryAtEnd != s.HA.PrimaryAtStart ||
		!strings.Contains(s.HA.URI, "127.0.0.1:") || strings.Contains(s.HA.URI, "127.0.0.2:") {
		t.Fatalf("json: %d runs, %d postgres comparisons, ha %+v", len(s.Runs), len(s.Postgres), s.HA)
	}
	for _, r := range s.Runs {
		checkHARun(t, r, s.HA.PrimaryAtStart)
	}
	if !strings.Contains(out.String(), "| distinct/4 | lock/redlock | ") || !strings.Contains(out.String(), "| cart/4 | db on ha | ") {
		t.Errorf("the report lacks rows")
	}
}

// checkHARun checks one run of TestRunHAEndToEnd.
func checkHARun(t *testing.T, r runJSON, primary string) {
	t.Helper()
	name := r.Name + "/" + runLabel(r)
	if r.Sent == 0 || r.Check.Created == 0 || !r.Check.OK {
		t.Errorf("%s: figures %+v, check %+v", name, r, r.Check)
	}
	c := r.CPU
	if c == nil || c.Problem != "" || c.Capacity <= 0 || c.Process <= 0 || c.PrimaryNode != primary {
		t.Fatalf("%s: cpu split %+v", name, c)
	}
	// The roles share out the process's time by the profile's samples: a
	// few in a tiny window on a loaded machine, so one role may get none
	// (TestSplitFigures checks the shares); together they are the process.
	if parts := c.Instances + c.Clients + c.BedProxies + c.Runtime; parts != 0 && math.Abs(parts-c.Process) > 1e-9 {
		t.Errorf("%s: the roles' %.4f cores are not the process's %.4f", name, parts, c.Process)
	}
	if r.Postgres == pgHA {
		// The single Postgres idles through an HA run, but its background
		// workers may still take a few ticks: only the primary must work.
		if r.PrimaryBefore != primary || r.PrimaryAfter != primary || c.Primary <= 0 {
			t.Errorf("%s: primary %s to %s, cpu %+v", name, r.PrimaryBefore, r.PrimaryAfter, c)
		}
		return
	}
	if r.PrimaryBefore != "" || c.Postgres <= 0 {
		t.Errorf("%s: primary %q, cpu %+v", name, r.PrimaryBefore, c)
	}
}
