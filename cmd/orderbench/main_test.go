package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/integration/testbed"
	"github.com/quorumlock/quorumlock/internal/benchkit"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// go-redis and pgx close their pools asynchronously, and the HTTP
		// transport's connection loops end once the peer's close arrives.
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper"),
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
	)
}

func TestParseDefaults(t *testing.T) {
	c, err := parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.clients != 64 || c.duration != 5*time.Second || c.warmup != time.Second || c.lockWait != 2*time.Second ||
		!slices.Equal(c.scenarios, allScenarios) || !slices.Equal(c.modes, allModes) || c.jsonPath != "" {
		t.Fatalf("defaults: %+v", c)
	}
	c, err = parse([]string{"-scenarios", "hot", "-modes", "db,lock", "-clients", "1024", "-duration", "10m", "-warmup", "0", "-pg-conns", "8"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.scenarios, []string{"hot"}) || !slices.Equal(c.modes, []string{"db", "lock"}) || c.clients != 1024 ||
		c.duration != 10*time.Minute || c.warmup != 0 || c.poolConns != 8 {
		t.Fatalf("parsed: %+v", c)
	}
}

// TestParseRejectsBadFlags: every bad flag is refused with an error that
// names it.
func TestParseRejectsBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		mention string
	}{
		{[]string{"-clients", "0"}, "-clients"},
		{[]string{"-clients", "1025"}, "-clients"},
		{[]string{"-duration", "99ms"}, "-duration"},
		{[]string{"-duration", "11m"}, "-duration"},
		{[]string{"-warmup", "-1s"}, "-warmup"},
		{[]string{"-warmup", "2m"}, "-warmup"},
		{[]string{"-lock-wait", "1ms"}, "-lock-wait"},
		{[]string{"-lock-wait", "6s"}, "-lock-wait"},
		{[]string{"-request-timeout", "100ms"}, "-request-timeout"},
		{[]string{"-request-timeout", "2s", "-lock-wait", "3s"}, "-request-timeout"},
		{[]string{"-pg-conns", "-1"}, "-pg-conns"},
		{[]string{"-pg-conns", "257"}, "-pg-conns"},
		{[]string{"-fsync", "sometimes"}, "-fsync"},
		{[]string{"-scenarios", ""}, "-scenarios"},
		{[]string{"-scenarios", "distinct,,hot"}, "-scenarios"},
		{[]string{"-scenarios", "cold"}, "cold"},
		{[]string{"-scenarios", "hot,hot"}, "twice"},
		{[]string{"-modes", "redis"}, "redis"},
		{[]string{"-modes", "db,db"}, "twice"},
		{[]string{"-clients", "x"}, "-clients"},
		{[]string{"-bogus"}, "bogus"},
		{[]string{"extra"}, "extra"},
	} {
		_, err := parse(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("parse(%q) = %v, want an error naming %s", tc.args, err, tc.mention)
		}
	}
}

func TestLatencies(t *testing.T) {
	if got := benchkit.Summarize(nil); got != (benchkit.LatencyStats{}) {
		t.Fatalf("empty: %+v", got)
	}
	var ds []time.Duration
	for i := 1000; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	got := benchkit.Summarize(ds)
	want := benchkit.LatencyStats{Count: 1000, P50ns: int64(500 * time.Millisecond), P99ns: int64(990 * time.Millisecond),
		P999ns: int64(999 * time.Millisecond), MaxNs: int64(time.Second)}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestAnswerKeyAndSeq(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		want   string
	}{
		{201, `{"orderId":"ord_1"}`, "201"},
		{503, `{"code":"service_unavailable","status":503}`, "503 service_unavailable"},
		{503, `{"code":"outcome_unknown"}`, answerOutcomeUnknown},
		{500, `not json`, "500"},
	} {
		if got := answerKey(tc.status, []byte(tc.body)); got != tc.want {
			t.Errorf("answerKey(%d, %s) = %q, want %q", tc.status, tc.body, got, tc.want)
		}
	}
	if n, ok := seqOf(idempotencyKey(17)); !ok || n != 17 {
		t.Fatalf("seqOf: %d %v", n, ok)
	}
	for _, k := range []string{"", "k", "x1", "k-1", "k01", "k1x"} {
		if _, ok := seqOf(k); ok {
			t.Errorf("seqOf(%q) accepted", k)
		}
	}
}

func TestVerdict(t *testing.T) {
	good := checkResult{Created: 10, Uncertain: 2, UncertainCreated: 1, Orders: 11, Units: 11, StockTaken: 11}
	if ok, p := good.verdict(); !ok {
		t.Fatalf("consistent figures refused: %s", p)
	}
	for name, c := range map[string]checkResult{
		"extra order":   {Created: 10, Orders: 11, Units: 11, StockTaken: 11, Unexpected: 1},
		"lost order":    {Created: 10, Orders: 9, Units: 9, StockTaken: 9, Missing: 1},
		"stock":         {Created: 10, Orders: 10, Units: 10, StockTaken: 12},
		"units":         {Created: 10, Orders: 10, Units: 20, StockTaken: 10},
		"swapped order": {Created: 10, Orders: 10, Units: 10, StockTaken: 10, Missing: 1, Unexpected: 1},
		"product":       {Created: 10, Orders: 10, Units: 10, StockTaken: 10, WrongProduct: 1},
	} {
		if ok, p := c.verdict(); ok || p == "" {
			t.Errorf("%s: accepted (%q)", name, p)
		}
	}
}

// TestReconcile: the check finds lost, unexpected, duplicated and
// misplaced orders, and counts uncertain requests that took effect.
func TestReconcile(t *testing.T) {
	users := []user{{id: "u1", product: "p1"}, {id: "u2", product: "p2"}}
	tallies := func() []*tally {
		return []*tally{
			{createdSeqs: []int{0, 1, 3}, uncertainSeqs: []int{2}},
			{createdSeqs: []int{0}, uncertainSeqs: []int{1}},
		}
	}
	row := func(u, key, p string) orderRow { return orderRow{user: u, key: key, product: p, quantity: 1} }
	base := []orderRow{row("u1", "k0", "p1"), row("u1", "k1", "p1"), row("u1", "k3", "p1"), row("u2", "k0", "p2")}
	run := func(rows []orderRow, taken int64) checkResult {
		r := newReconciler(users)
		for _, o := range rows {
			r.add(o)
		}
		return r.finish(tallies(), taken)
	}
	c := run(append(slices.Clone(base), row("u1", "k2", "p1")), 5)
	if !c.OK || c.Created != 4 || c.Uncertain != 2 || c.UncertainCreated != 1 || c.Orders != 5 {
		t.Fatalf("consistent run: %+v", c)
	}
	for name, tc := range map[string]struct {
		rows  []orderRow
		taken int64
	}{
		"lost order":      {base[1:], 3},
		"unanswered key":  {append(slices.Clone(base), row("u2", "k7", "p2")), 5},
		"foreign key":     {append(slices.Clone(base), row("u2", "other", "p2")), 5},
		"duplicate":       {append(slices.Clone(base), row("u2", "k0", "p2")), 5},
		"wrong product":   {append(base[:3:3], row("u2", "k0", "p1")), 4},
		"stock not taken": {base, 3},
		"stock overtaken": {base, 5},
	} {
		if c := run(tc.rows, tc.taken); c.OK {
			t.Errorf("%s: accepted: %+v", name, c)
		}
	}
}

func TestSummarizeCompares(t *testing.T) {
	start := time.Now()
	w := window{start: start, end: start.Add(2 * time.Second)}
	tal := func(created, busy int) []*tally {
		return []*tally{{inWindow: map[string]int{"201": created, "503 service_unavailable": busy}, created: created,
			latencies: []time.Duration{time.Millisecond}}}
	}
	cfg, err := parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	s := summarize(cfg, "test", "abcd", []*runResult{
		{scenario: scenarioDistinct, mode: modeLock, window: w, tallies: tal(100, 0), check: checkResult{OK: true}},
		{scenario: scenarioDistinct, mode: modeDB, window: w, tallies: tal(200, 0), check: checkResult{OK: true}},
		{scenario: scenarioHot, mode: modeLock, window: w, tallies: tal(50, 10), check: checkResult{OK: true}},
		{scenario: scenarioHot, mode: modeDB, window: w, tallies: tal(0, 4), check: checkResult{OK: false, Problem: "boom"}},
	})
	if len(s.Comparisons) != 2 {
		t.Fatalf("comparisons: %+v", s.Comparisons)
	}
	if c := s.Comparisons[0]; c.Faster != modeDB || c.Ratio == nil || *c.Ratio != 2 {
		t.Fatalf("distinct: %+v", c)
	}
	if c := s.Comparisons[1]; c.Faster != modeLock || c.Ratio != nil {
		t.Fatalf("hot: %+v", c)
	}
	if r := s.Runs[2]; r.Requests != 60 || r.RequestsPerSec != 30 || r.CreatedPerSec != 25 || r.Other["503 service_unavailable"] != 10 || r.Other["201"] != 0 {
		t.Fatalf("hot/lock: %+v", r)
	}
	if err := checkFailures(s); err == nil || !strings.Contains(err.Error(), "hot/db") || strings.Contains(err.Error(), "distinct") {
		t.Fatalf("checkFailures: %v", err)
	}
	var out strings.Builder
	report(&out, s)
	for _, want := range []string{"| hot | lock | 30 | 25 |", "503 service_unavailable: 10", "db placed orders 2.00x as fast as lock", "only lock placed orders", "CHECK FAILED: boom"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// TestRunEndToEnd runs the whole command, tiny, on a bed of its own (the
// local provider unless QUORUMLOCK_TESTBED says otherwise) and checks that
// every (scenario, mode) pair placed orders and passed the database check.
func TestRunEndToEnd(t *testing.T) {
	if os.Getenv(testbed.EnvProvider) == "" {
		t.Setenv(testbed.EnvProvider, testbed.ProviderLocal)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	jsonPath := filepath.Join(t.TempDir(), "out.json")
	var out strings.Builder
	err := run(ctx, []string{"-clients", "4", "-duration", "300ms", "-warmup", "100ms", "-json", jsonPath, "-quiet"}, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range allScenarios {
		for _, mode := range allModes {
			if !strings.Contains(out.String(), "| "+sc+" | "+mode+" | ") {
				t.Errorf("the table has no row %s/%s", sc, mode)
			}
		}
		if !strings.Contains(out.String(), "- "+sc+": ") {
			t.Errorf("no comparison for %s", sc)
		}
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var s summaryJSON
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Runs) != len(allScenarios)*len(allModes) || len(s.Comparisons) != len(allScenarios) {
		t.Fatalf("json: %d runs, %d comparisons", len(s.Runs), len(s.Comparisons))
	}
	for _, r := range s.Runs {
		// The window is short: on a loaded machine a run's first answers
		// can all come after it, so the figures of the window may be zero.
		// Every run must still have placed orders and pass the check.
		if r.Sent == 0 || r.Check.Created == 0 || r.Latency201.Count != r.Created ||
			(r.Created > 0 && (r.Latency201.P50ns <= 0 || r.CreatedPerSec <= 0)) {
			t.Errorf("%s/%s: figures: %+v", r.Scenario, r.Mode, r)
		}
		if !r.Check.OK || r.Check.Orders < r.Created || r.Check.Orders == 0 || r.Check.StockTaken != int64(r.Check.Orders) {
			t.Errorf("%s/%s: check: %+v", r.Scenario, r.Mode, r.Check)
		}
	}
}
