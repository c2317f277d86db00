package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/devtools/testbed"
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
		// gRPC and the etcd client end some goroutines just after Close.
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/transport.(*controlBuffer).get"),
	)
}

func TestParseDefaults(t *testing.T) {
	c, err := parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.clients, []int{64, 512}) || c.duration != 5*time.Second || c.warmup != time.Second || c.lockWait != 500*time.Millisecond ||
		c.lockRule != "contended" || c.busyBuyers != 300 ||
		!slices.Equal(c.scenarios, allScenarios) || !slices.Equal(c.modes, allModes) || !slices.Equal(c.backends, allBackends) || !c.usesEtcd() ||
		c.jsonPath != "" || c.plotPath != "" ||
		c.flash != (flashConfig{units: 500, buyers: 5000, spread: time.Second, seed: 1}) {
		t.Fatalf("defaults: %+v", c)
	}
	c, err = parse([]string{"-scenarios", "hot,mixed", "-modes", "db,lock", "-backends", "redlock", "-clients", "1024", "-duration", "10m", "-warmup", "0", "-pg-conns", "8"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.scenarios, []string{"hot", "mixed"}) || !slices.Equal(c.modes, []string{"db", "lock"}) || !slices.Equal(c.clients, []int{1024}) ||
		!slices.Equal(c.backends, []string{"redlock"}) || c.usesEtcd() ||
		c.duration != 10*time.Minute || c.warmup != 0 || c.poolConns != 8 {
		t.Fatalf("parsed: %+v", c)
	}
	c, err = parse([]string{"-clients", " 4, 1,16 ", "-flash-units", "1", "-flash-buyers", "10000", "-flash-spread", "0", "-seed", "7", "-plot", "x.PNG"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.clients, []int{4, 1, 16}) || c.maxCount() != 16 || c.flash != (flashConfig{units: 1, buyers: 10000, spread: 0, seed: 7}) || c.plotPath != "x.PNG" {
		t.Fatalf("parsed: %+v", c)
	}
	if _, err := parse([]string{"-flash-units", "1000000", "-flash-spread", "10m"}); err != nil {
		t.Fatalf("the largest sale: %v", err)
	}
}

// TestPlans: distinct, hot and cart run once per client count and mode, flash
// once per mode, mixed once per mode with the first count; lock mode once
// per backend.
func TestPlans(t *testing.T) {
	c, err := parse([]string{"-scenarios", "hot,cart,flash,mixed", "-modes", "lock,db", "-backends", "redlock", "-clients", "8,2"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range c.plans() {
		got = append(got, p.name()+"/"+p.label()+"/"+fmt.Sprint(p.clients))
	}
	want := []string{"hot/8/lock/redlock/8", "hot/8/db/8", "hot/2/lock/redlock/2", "hot/2/db/2", "cart/8/lock/redlock/8", "cart/8/db/8",
		"cart/2/lock/redlock/2", "cart/2/db/2", "flash/lock/redlock/0", "flash/db/0", "mixed/lock/redlock/8", "mixed/db/8"}
	if !slices.Equal(got, want) {
		t.Fatalf("plans: %q, want %q", got, want)
	}
	if !c.hasSale() {
		t.Fatal("no sale")
	}
	c, err = parse([]string{"-scenarios", "hot,flash", "-modes", "db,lock", "-backends", "etcd,redlock", "-clients", "4"})
	if err != nil {
		t.Fatal(err)
	}
	got = nil
	for _, p := range c.plans() {
		got = append(got, p.name()+"/"+p.label()+" "+p.tag())
	}
	want = []string{"hot/4/db db", "hot/4/lock/etcd lock-etcd", "hot/4/lock/redlock lock-redlock", "flash/db db", "flash/lock/etcd lock-etcd", "flash/lock/redlock lock-redlock"}
	if !slices.Equal(got, want) {
		t.Fatalf("plans: %q, want %q", got, want)
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
		{[]string{"-clients", "64,1025"}, "-clients"},
		{[]string{"-clients", "64,64"}, "twice"},
		{[]string{"-clients", "64,"}, "-clients"},
		{[]string{"-clients", ""}, "-clients"},
		{[]string{"-clients", "4;8"}, "-clients"},
		{[]string{"-clients", "-4"}, "-clients"},
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
		{[]string{"-flash-units", "0"}, "-flash-units"},
		{[]string{"-flash-units", "1000001"}, "-flash-units"},
		{[]string{"-flash-units", "many"}, "-flash-units"},
		{[]string{"-flash-buyers", "0"}, "-flash-buyers"},
		{[]string{"-flash-buyers", "10001"}, "-flash-buyers"},
		{[]string{"-busy-buyers", "0"}, "-busy-buyers"},
		{[]string{"-lock-rule", "sometimes"}, "-lock-rule"},
		{[]string{"-lock-rule", ""}, "-lock-rule"},
		{[]string{"-flash-spread", "-1ms"}, "-flash-spread"},
		{[]string{"-flash-spread", "11m"}, "-flash-spread"},
		{[]string{"-flash-spread", "1"}, "-flash-spread"},
		{[]string{"-seed", "-1"}, "-seed"},
		{[]string{"-seed", "x"}, "-seed"},
		{[]string{"-plot", "out.svg"}, "-plot"},
		{[]string{"-scenarios", ""}, "-scenarios"},
		{[]string{"-scenarios", "distinct,,hot"}, "-scenarios"},
		{[]string{"-scenarios", "cold"}, "cold"},
		{[]string{"-scenarios", "hot,hot"}, "twice"},
		{[]string{"-scenarios", "flash,flash"}, "twice"},
		{[]string{"-modes", "redis"}, "redis"},
		{[]string{"-modes", "db,db"}, "twice"},
		{[]string{"-backends", "zookeeper"}, "zookeeper"},
		{[]string{"-backends", "etcd,etcd"}, "twice"},
		{[]string{"-backends", ""}, "-backends"},
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
	good := checkResult{Created: 10, Uncertain: 2, UncertainCreated: 1, Orders: 11, Units: 11, WantUnits: 11, StockTaken: 11}
	if ok, p := good.verdict(); !ok {
		t.Fatalf("consistent figures refused: %s", p)
	}
	carts := checkResult{Created: 10, Orders: 10, Units: 30, WantUnits: 30, StockTaken: 30}
	if ok, p := carts.verdict(); !ok {
		t.Fatalf("consistent carts refused: %s", p)
	}
	for name, c := range map[string]checkResult{
		"extra order":   {Created: 10, Orders: 11, Units: 11, WantUnits: 10, StockTaken: 11, Unexpected: 1},
		"lost order":    {Created: 10, Orders: 9, Units: 9, WantUnits: 9, StockTaken: 9, Missing: 1},
		"stock":         {Created: 10, Orders: 10, Units: 10, WantUnits: 10, StockTaken: 12},
		"units":         {Created: 10, Orders: 10, Units: 20, WantUnits: 10, StockTaken: 10},
		"cart units":    {Created: 10, Orders: 10, Units: 29, WantUnits: 30, StockTaken: 30},
		"cart stock":    {Created: 10, Orders: 10, Units: 30, WantUnits: 30, StockTaken: 29},
		"swapped order": {Created: 10, Orders: 10, Units: 10, WantUnits: 10, StockTaken: 10, Missing: 1, Unexpected: 1},
		"product":       {Created: 10, Orders: 10, Units: 10, WantUnits: 10, StockTaken: 10, WrongProduct: 1},
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
	cfg, err := parse([]string{"-scenarios", "distinct,hot"})
	if err != nil {
		t.Fatal(err)
	}
	plan := func(sc string, n int, label string) runPlan {
		mode, backend, _ := strings.Cut(label, "/")
		return runPlan{scenario: sc, clients: n, mode: mode, backend: backend}
	}
	s := summarize(cfg, "test", "abcd", []*runResult{
		{runPlan: plan(scenarioDistinct, 64, "lock/redlock"), window: w, tallies: tal(100, 0), check: checkResult{OK: true}},
		{runPlan: plan(scenarioDistinct, 64, modeDB), window: w, tallies: tal(200, 0), check: checkResult{OK: true}},
		{runPlan: plan(scenarioHot, 64, "lock/redlock"), window: w, tallies: tal(50, 10), check: checkResult{OK: true}},
		{runPlan: plan(scenarioHot, 64, modeDB), window: w, tallies: tal(0, 4), check: checkResult{OK: false, Problem: "boom"}},
		{runPlan: plan(scenarioHot, 512, "lock/redlock"), window: w, tallies: tal(90, 0), check: checkResult{OK: true}},
		{runPlan: plan(scenarioHot, 512, "lock/etcd"), window: w, tallies: tal(60, 0), check: checkResult{OK: false, Problem: "bang"}},
		{runPlan: plan(scenarioHot, 512, modeDB), window: w, tallies: tal(30, 0), check: checkResult{OK: true}},
	})
	if len(s.Comparisons) != 4 || s.SaleComparisons != nil || s.Config.Flash != nil || s.EtcdMembers != etcdMembers {
		t.Fatalf("comparisons: %+v %+v", s.Comparisons, s.SaleComparisons)
	}
	if c := s.Comparisons[0]; c.Name != "distinct/64" || c.Clients != 64 || c.Backend != backendRedlock || c.Faster != modeDB || c.Ratio == nil || *c.Ratio != 2 {
		t.Fatalf("distinct: %+v", c)
	}
	if c := s.Comparisons[1]; c.Name != "hot/64" || c.Faster != modeLock || c.Ratio != nil {
		t.Fatalf("hot/64: %+v", c)
	}
	if c := s.Comparisons[2]; c.Name != "hot/512" || c.Scenario != scenarioHot || c.Backend != backendRedlock || c.Faster != modeLock || c.Ratio == nil || *c.Ratio != 3 {
		t.Fatalf("hot/512: %+v", c)
	}
	if c := s.Comparisons[3]; c.Name != "hot/512" || c.Backend != backendEtcd || c.Faster != modeLock || c.Ratio == nil || *c.Ratio != 2 || c.DBCreatedPerSec != 15 {
		t.Fatalf("hot/512 on etcd: %+v", c)
	}
	if r := s.Runs[2]; r.Name != "hot/64" || r.Backend != backendRedlock || r.Requests != 60 || r.RequestsPerSec != 30 || r.CreatedPerSec != 25 ||
		r.Other["503 service_unavailable"] != 10 || r.Other["201"] != 0 {
		t.Fatalf("hot/lock: %+v", r)
	}
	if r := s.Runs[6]; r.Mode != modeDB || r.Backend != "" {
		t.Fatalf("hot/db: %+v", r)
	}
	if err := checkFailures(s); err == nil || !strings.Contains(err.Error(), "hot/64/db") || !strings.Contains(err.Error(), "hot/512/lock/etcd") || strings.Contains(err.Error(), "distinct") {
		t.Fatalf("checkFailures: %v", err)
	}
	checkCompareReport(t, s)
}

// checkCompareReport checks the report of TestSummarizeCompares.
func checkCompareReport(t *testing.T, s summaryJSON) {
	t.Helper()
	var out strings.Builder
	report(&out, s)
	for _, want := range []string{"| hot/64 | lock/redlock | 30 | 25 |", "| hot/512 | db |", "| hot/512 | lock/etcd | 30 | 30 |", "503 service_unavailable: 10",
		"- distinct/64: db placed orders 2.00x as fast as lock/redlock (lock/redlock 50, db 100 orders/s)",
		"- hot/64: only lock/redlock placed orders", "- hot/512: lock/redlock placed orders 3.00x as fast as db",
		"- hot/512: lock/etcd placed orders 2.00x as fast as db (lock/etcd 30, db 15 orders/s)", "CHECK FAILED: boom", "hot/512/lock/etcd: CHECK FAILED: bang"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "Flash") || strings.Contains(out.String(), "Mixed") {
		t.Errorf("sale tables without a sale:\n%s", out.String())
	}
}

// useLocalBed makes the end-to-end tests start their bed on local
// processes unless QUORUMLOCK_TESTBED says otherwise.
func useLocalBed(t *testing.T) {
	if os.Getenv(testbed.EnvProvider) == "" {
		t.Setenv(testbed.EnvProvider, testbed.ProviderLocal)
	}
}

// readSummary reads the -json file at path.
func readSummary(t *testing.T, path string) summaryJSON {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s summaryJSON
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRunEndToEnd runs the closed loops of the command, tiny, at two
// client counts on a bed of its own, and checks that every (scenario,
// count, mode) run placed orders and passed the database check.
func TestRunEndToEnd(t *testing.T) {
	useLocalBed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	jsonPath := filepath.Join(t.TempDir(), "out.json")
	var out strings.Builder
	err := run(ctx, []string{"-scenarios", "distinct,hot", "-clients", "4,2", "-duration", "300ms", "-warmup", "100ms", "-backends", "redlock,etcd",
		"-json", jsonPath, "-quiet"}, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"distinct/4", "distinct/2", "hot/4", "hot/2"}
	labels := []string{"lock/redlock", "lock/etcd", "db"}
	for _, name := range names {
		for _, label := range labels {
			if !strings.Contains(out.String(), "| "+name+" | "+label+" | ") {
				t.Errorf("the table has no row %s/%s", name, label)
			}
		}
		for _, lock := range labels[:2] {
			if !strings.Contains(out.String(), "- "+name+": ") || !strings.Contains(out.String(), "("+lock+" ") {
				t.Errorf("no comparison of %s with db for %s", lock, name)
			}
		}
	}
	s := readSummary(t, jsonPath)
	if len(s.Runs) != len(names)*len(labels) || len(s.Comparisons) != 2*len(names) || !slices.Equal(s.Config.ClientCounts, []int{4, 2}) ||
		s.EtcdMembers != etcdMembers || !slices.Equal(s.Config.Backends, allBackends) {
		t.Fatalf("json: %d runs, %d comparisons, config %+v", len(s.Runs), len(s.Comparisons), s.Config)
	}
	for _, r := range s.Runs {
		if (r.Mode == modeLock) != (r.Backend != "") {
			t.Errorf("%s/%s: backend %q", r.Name, r.Mode, r.Backend)
		}
		// The window is short: on a loaded machine a run's first answers
		// can all come after it, so the figures of the window may be zero.
		// Every run must still have placed orders and pass the check.
		if r.Sent == 0 || r.Check.Created == 0 || r.Latency201.Count != r.Created || r.Sale != nil || r.Mixed != nil ||
			(r.Created > 0 && (r.Latency201.P50ns <= 0 || r.CreatedPerSec <= 0)) {
			t.Errorf("%s/%s: figures: %+v", r.Name, r.Mode, r)
		}
		if !r.Check.OK || r.Check.Orders < r.Created || r.Check.Orders == 0 || r.Check.StockTaken != int64(r.Check.Orders) {
			t.Errorf("%s/%s: check: %+v", r.Name, r.Mode, r.Check)
		}
	}
}

// TestRunSalesEndToEnd runs flash and mixed, tiny, in both modes (lock on
// both backends) on a bed
// of its own: every buyer must get its final answer, the product sell out
// exactly, the checks pass, and the tables, the JSON and the plot hold
// every run.
func TestRunSalesEndToEnd(t *testing.T) {
	useLocalBed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	jsonPath, plotPath := filepath.Join(dir, "out.json"), filepath.Join(dir, "out.png")
	var out strings.Builder
	err := run(ctx, []string{"-scenarios", "flash,mixed", "-modes", "lock,db", "-backends", "redlock,etcd", "-flash-units", "20", "-flash-buyers", "200", "-flash-spread", "200ms",
		"-clients", "4", "-duration", "500ms", "-warmup", "0", "-json", jsonPath, "-plot", plotPath, "-quiet"}, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| flash | lock/redlock | 20 | 200 |", "| flash | lock/etcd | 20 | 200 |", "| flash | db | 20 | 200 |",
		"| mixed | lock/redlock | 20 | 200 |", "| mixed | lock/etcd | 20 | 200 |", "| mixed | db | 20 | 200 |",
		"| lock/redlock | ", "| lock/etcd | ", "| db | ", "- flash, lock/redlock vs db: every buyer answered", "- flash, lock/etcd vs db: every buyer answered",
		"- mixed, lock/redlock vs db: distinct p99 during the sale: lock/redlock ", "- mixed, lock/etcd vs db: distinct p99 during the sale: lock/etcd "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	if strings.Contains(out.String(), "CHECK FAILED") || strings.Contains(out.String(), "| distinct/") {
		t.Errorf("unexpected report lines")
	}
	s := readSummary(t, jsonPath)
	if len(s.Runs) != 6 || len(s.Comparisons) != 0 || len(s.SaleComparisons) != 4 || s.Config.Flash == nil || s.Config.Flash.Buyers != 200 {
		t.Fatalf("json: %d runs, %d comparisons, %d sale comparisons, config %+v", len(s.Runs), len(s.Comparisons), len(s.SaleComparisons), s.Config)
	}
	for _, r := range s.Runs {
		checkSaleRun(t, r)
	}
	checkPNG(t, plotPath)
}

// checkSaleRun checks one run of TestRunSalesEndToEnd.
func checkSaleRun(t *testing.T, r runJSON) {
	t.Helper()
	f := r.Sale
	if f == nil {
		t.Fatalf("%s/%s: no sale figures", r.Name, r.Mode)
	}
	if f.Oversold != 0 || !f.Check.OK || f.StockLeft < 0 || !f.AllAnswered || f.NoFinalAnswer != 0 || f.Buyers != 200 ||
		f.Created+f.OutOfStock != 200 || f.Created != 20 || !f.SoldOut || f.SoldOutAfterNs <= 0 || f.AllAnsweredAfterNs < f.SoldOutAfterNs ||
		f.AnswerLatency.Count != 200 || f.Requests != 200+f.Retries || f.PeakDBConns < 0 {
		t.Errorf("%s/%s: sale: %+v", r.Name, r.Mode, f)
	}
	if f.Check.Created != 20 || f.Check.Orders != 20+f.Check.UncertainCreated || f.SoldUnits != 20 || f.StockLeft != 0 {
		t.Errorf("%s/%s: sale check: %+v", r.Name, r.Mode, f.Check)
	}
	if !r.Check.OK {
		t.Errorf("%s/%s: check: %+v", r.Name, r.Mode, r.Check)
	}
	if r.Scenario != scenarioMixed {
		return
	}
	m := r.Mixed
	if m == nil || r.Clients != 4 || m.During.WindowNs < int64(500*time.Millisecond) || m.Without.WindowNs != m.During.WindowNs ||
		m.During.Created == 0 || m.Without.Created == 0 || m.P99Ratio == nil || m.During.PeakDBConns < 0 || m.Without.PeakDBConns < 0 ||
		r.Check.Created < m.During.Created+m.Without.Created {
		t.Errorf("%s/%s: mixed: %+v", r.Name, r.Mode, m)
	}
}

// checkPNG fails unless path holds a PNG image of some size.
func checkPNG(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) || len(b) < 1000 {
		t.Fatalf("%s is not a PNG (%d bytes)", path, len(b))
	}
}
