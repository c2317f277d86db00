package main

import (
	"errors"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestBuyerNote: 201 and 409 out of stock end a buyer; 503, in progress
// and no answer are retried after the Retry-After, at most maxRetryWait;
// any other answer ends it; every request whose outcome is unknown marks
// the buyer uncertain.
func TestBuyerNote(t *testing.T) {
	for _, tc := range []struct {
		rep       reply
		err       error
		wait      time.Duration
		final     bool
		busy      int
		uncertain bool
	}{
		{reply{key: "201", retryAfter: -1}, nil, 0, true, 0, false},
		{reply{key: answerOutOfStock, retryAfter: -1}, nil, 0, true, 0, false},
		{reply{key: "503 service_unavailable", retryAfter: 0}, nil, 0, false, 1, false},
		{reply{key: "503 service_unavailable", retryAfter: 5 * time.Second}, nil, maxRetryWait, false, 1, false},
		{reply{key: "503", retryAfter: -1}, nil, maxRetryWait, false, 1, false},
		{reply{key: answerOutcomeUnknown, retryAfter: 300 * time.Millisecond}, nil, 300 * time.Millisecond, false, 1, true},
		{reply{key: answerInProgress, retryAfter: time.Second}, nil, time.Second, false, 0, true},
		{reply{key: "409 request_in_progress", retryAfter: -1}, nil, maxRetryWait, false, 0, true},
		{reply{}, errors.New("connection reset"), maxRetryWait, false, 0, true},
		{reply{key: "500 internal_error", retryAfter: -1}, nil, 0, true, 0, false},
	} {
		var r buyerResult
		wait, final := r.note(tc.rep, tc.err)
		if wait != tc.wait || final != tc.final || r.busy != tc.busy || r.uncertain != tc.uncertain {
			t.Errorf("note(%+v, %v) = %v %v, busy %d uncertain %v; want %v %v, %d %v", tc.rep, tc.err, wait, final, r.busy, r.uncertain,
				tc.wait, tc.final, tc.busy, tc.uncertain)
		}
		if final && r.final != tc.rep.key {
			t.Errorf("note(%+v): final %q", tc.rep, r.final)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"": -1, "0": 0, "2": 2 * time.Second, "-1": -1, "soon": -1, "99999999999": maxRetryAfterSecs * time.Second,
		now.Add(3 * time.Second).Format(http.TimeFormat): 3 * time.Second,
		now.Add(-time.Hour).Format(http.TimeFormat):      0,
	} {
		if got := retryAfter(v, now); got != want {
			t.Errorf("retryAfter(%q) = %v, want %v", v, got, want)
		}
	}
}

// TestSchedule: the same seed, the same schedule, uniform within the
// spread; another seed, another schedule.
func TestSchedule(t *testing.T) {
	a, b := schedule(1000, time.Second, 1), schedule(1000, time.Second, 1)
	if !slices.Equal(a, b) || slices.Equal(a, schedule(1000, time.Second, 2)) {
		t.Fatal("the schedule does not follow the seed")
	}
	early := 0
	for _, d := range a {
		if d < 0 || d >= time.Second {
			t.Fatalf("offset %v outside the spread", d)
		}
		if d < 500*time.Millisecond {
			early++
		}
	}
	if early < 400 || early > 600 {
		t.Fatalf("%d of 1000 offsets in the first half", early)
	}
	if z := schedule(3, 0, 1); !slices.Equal(z, make([]time.Duration, 3)) {
		t.Fatalf("no spread: %v", z)
	}
}

// TestSaleTallies: a 201 is an order, a 409 none, a buyer whose outcome is
// unknown may have one, one that only saw 503s has none.
func TestSaleTallies(t *testing.T) {
	s := &saleResult{buyers: []buyerResult{
		{final: answerCreated, uncertain: true}, {final: answerOutOfStock, uncertain: true},
		{uncertain: true}, {busy: 3}, {final: "500 internal_error"},
	}}
	users := []user{{id: "b1", product: "f"}, {id: "b2", product: "f"}, {id: "b3", product: "f"}, {id: "b4", product: "f"}, {id: "b5", product: "f"}}
	run := func(rows ...string) checkResult {
		r := newReconciler(users)
		for _, u := range rows {
			r.add(orderRow{user: u, key: idempotencyKey(0), product: "f", quantity: 1})
		}
		return r.finish(s.tallies(), int64(len(rows)))
	}
	if c := run("b1", "b3"); !c.OK || c.Created != 1 || c.Uncertain != 2 || c.UncertainCreated != 1 {
		t.Fatalf("consistent sale: %+v", c)
	}
	for name, rows := range map[string][]string{"a 409 with an order": {"b1", "b2"}, "503s only, with an order": {"b1", "b4"}, "a 201 without": {"b3"}} {
		if c := run(rows...); c.OK {
			t.Errorf("%s: accepted: %+v", name, c)
		}
	}
}

// TestWithSale: oversold units, negative stock and lost units fail the
// sale's check, on top of the buyers' own.
func TestWithSale(t *testing.T) {
	ok := checkResult{OK: true}
	if c := ok.withSale(10, 10, 0); !c.OK {
		t.Fatalf("a clean sell-out: %s", c.Problem)
	}
	if c := ok.withSale(10, 4, 6); !c.OK {
		t.Fatalf("a partial sale: %s", c.Problem)
	}
	for name, tc := range map[string]struct {
		c           checkResult
		sold, left  int64
		wantProblem string
	}{
		"oversold": {ok, 12, -2, "2 units oversold"},
		"negative": {ok, 10, -1, "negative"},
		"lost":     {ok, 8, 0, "8 units sold and 0 left"},
		"buyers":   {checkResult{Problem: "1 orders no 201 answer accounts for"}, 10, 0, "no 201"},
	} {
		c := tc.c.withSale(10, tc.sold, tc.left)
		if c.OK || !strings.Contains(c.Problem, tc.wantProblem) {
			t.Errorf("%s: %v %q", name, c.OK, c.Problem)
		}
	}
}

// TestLiveWindow: an open window measures everything answered before its
// close, a fixed one what fits in it.
func TestLiveWindow(t *testing.T) {
	start := time.Now()
	w := openWindow(start)
	if !w.contains(start, start.Add(time.Hour)) || w.contains(start.Add(-time.Nanosecond), start) {
		t.Fatal("open window")
	}
	if started, ended := w.state(start.Add(-time.Millisecond)); started || ended {
		t.Fatal("state before the start")
	}
	end := w.close()
	if end.start != start || end.end.Before(start) || w.contains(start, end.end.Add(time.Nanosecond)) || !w.contains(start, end.end) {
		t.Fatalf("closed window: %+v", end)
	}
	if _, ended := w.state(end.end.Add(time.Millisecond)); !ended {
		t.Fatal("state after the end")
	}
	f := fixedWindow(start, time.Second)
	if got := f.close(); got.end != start.Add(time.Second) || f.contains(start, start.Add(2*time.Second)) {
		t.Fatalf("fixed window: %+v", got)
	}
}

// TestSummarizeSales: the sale's figures, the mixed ones, the
// comparisons, the report and the plot; an oversold sale fails the run.
func TestSummarizeSales(t *testing.T) {
	start := time.Now()
	at := func(d time.Duration) time.Time { return start.Add(d) }
	sale := func(product string, last time.Duration, soldOut bool) *saleResult {
		s := &saleResult{product: product, units: 2, start: start, peakConns: 7, soldUnits: 2, check: checkResult{OK: true}, buyers: []buyerResult{
			{first: at(0), answered: at(10 * time.Millisecond), final: answerCreated, tries: 1},
			{first: at(5 * time.Millisecond), answered: at(last / 2), final: answerCreated, tries: 3, busy: 2},
			{first: at(time.Millisecond), answered: at(last), final: answerOutOfStock, tries: 2, busy: 1},
		}}
		if !soldOut {
			s.soldUnits, s.stockLeft = 1, 1
		}
		return s
	}
	w := window{start: start, end: at(2 * time.Second)}
	tal := func(lat time.Duration) []*tally {
		return []*tally{{inWindow: map[string]int{"201": 10}, created: 10, latencies: slices.Repeat([]time.Duration{lat}, 10)}}
	}
	cfg, err := parse([]string{"-scenarios", "flash,mixed", "-clients", "4"})
	if err != nil {
		t.Fatal(err)
	}
	res := []*runResult{
		{runPlan: runPlan{scenario: scenarioFlash, mode: modeLock, backend: backendRedlock}, sale: sale("flash.lock", 100*time.Millisecond, true), check: checkResult{OK: true}, peakConns: -1},
		{runPlan: runPlan{scenario: scenarioFlash, mode: modeDB}, sale: sale("flash.db", 400*time.Millisecond, true), check: checkResult{OK: true}, peakConns: -1},
		{runPlan: runPlan{scenario: scenarioMixed, clients: 4, mode: modeLock, backend: backendRedlock}, sale: sale("mixed.lock", 200*time.Millisecond, false), window: w, tallies: tal(4 * time.Millisecond),
			peakConns: 9, alone: &phase{window: w, tallies: tal(2 * time.Millisecond), peakConns: 5}, check: checkResult{OK: true}},
		{runPlan: runPlan{scenario: scenarioMixed, clients: 4, mode: modeDB}, sale: sale("mixed.db", 100*time.Millisecond, true), window: w, tallies: tal(10 * time.Millisecond),
			peakConns: 12, alone: &phase{window: w, tallies: tal(2 * time.Millisecond), peakConns: 6}, check: checkResult{OK: true}},
		{runPlan: runPlan{scenario: scenarioFlash, mode: modeLock, backend: backendEtcd}, sale: sale("flash.lock-etcd", 800*time.Millisecond, true), check: checkResult{OK: true}, peakConns: -1},
	}
	s := summarize(cfg, "test", "abcd", res)
	checkSaleFigures(t, s)
	var out strings.Builder
	report(&out, s)
	for _, want := range []string{
		"| flash | lock/redlock | 2 | 3 | 50ms | 100ms |", "| 2 | 1 | 0 | 3 | 3 | 7 | 0 | ok (0 orders) |", "| mixed | lock/redlock | 2 | 3 | not sold out (1 left) |",
		"| flash | lock/etcd | 2 | 3 | 400ms | 800ms |",
		"| lock/redlock | 2s | 5 | 5 | 2ms | 4ms | 2.00x | 5 | 9 |", "| db | 2s | 5 | 5 | 2ms | 10ms | 5.00x | 6 | 12 |",
		"- flash, lock/redlock vs db: every buyer answered 4.00x sooner with lock/redlock (lock/redlock 100ms, db 400ms); sold out 4.00x sooner with lock/redlock (lock/redlock 50ms, db 200ms)",
		"- flash, lock/etcd vs db: every buyer answered 2.00x sooner with db (lock/etcd 800ms, db 400ms); sold out 2.00x sooner with db (lock/etcd 400ms, db 200ms)",
		"- mixed, lock/redlock vs db: distinct p99 during the sale: lock/redlock 0.40x db's (lock/redlock 4ms, db 10ms); every buyer answered 2.00x sooner with db (lock/redlock 200ms, db 100ms); sold out: (lock/redlock -, db 50ms)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	if err := checkFailures(s); err != nil {
		t.Fatalf("clean runs fail: %v", err)
	}
	path := filepath.Join(t.TempDir(), "p.png")
	if err := writePlot(path, res); err != nil {
		t.Fatal(err)
	}
	checkPNG(t, path)
	checkOversold(t, cfg, res, sale("mixed.db", time.Second, true))
}

// checkOversold replaces the sale of the db run of mixed (res[3]) by over,
// made to sell a unit more than it had: the check must fail the run.
func checkOversold(t *testing.T, cfg config, res []*runResult, over *saleResult) {
	t.Helper()
	over.soldUnits, over.stockLeft = 3, -1
	over.check = checkResult{OK: true}.withSale(2, 3, -1)
	res[3].sale = over
	s := summarize(cfg, "test", "abcd", res)
	var out strings.Builder
	report(&out, s)
	if err := checkFailures(s); err == nil || !strings.Contains(err.Error(), "mixed/db") || !strings.Contains(err.Error(), "oversold") ||
		!strings.Contains(out.String(), "CHECK FAILED: the sale: 1 units oversold") || s.Runs[3].Sale.Oversold != 1 {
		t.Fatalf("an oversold sale: %v\n%s", err, out.String())
	}
}

// checkSaleFigures checks the JSON figures of TestSummarizeSales.
func checkSaleFigures(t *testing.T, s summaryJSON) {
	t.Helper()
	if s.Config.Flash == nil || s.Config.Flash.Units != 500 || s.Config.Flash.MaxTries != maxBuyerTries || len(s.Comparisons) != 0 || len(s.SaleComparisons) != 3 {
		t.Fatalf("summary: %+v", s)
	}
	f := s.Runs[0].Sale
	if f == nil || f.Created != 2 || f.OutOfStock != 1 || f.NoFinalAnswer != 0 || !f.AllAnswered || !f.SoldOut ||
		f.SoldOutAfterNs != int64(50*time.Millisecond) || f.AllAnsweredAfterNs != int64(100*time.Millisecond) ||
		f.Requests != 6 || f.Retries != 3 || f.Seen503 != 3 || f.AnswerLatency.Count != 3 || f.Answers[answerCreated] != 2 || s.Runs[0].Sent != 6 {
		t.Fatalf("flash/lock: %+v", f)
	}
	m := s.Runs[2].Mixed
	if m == nil || m.P99Ratio == nil || *m.P99Ratio != 2 || m.During.PeakDBConns != 9 || m.Without.PeakDBConns != 5 || s.Runs[2].Sent != 6 {
		t.Fatalf("mixed/lock: %+v", m)
	}
	if c := s.SaleComparisons[1]; c.Scenario != scenarioFlash || c.Backend != backendEtcd || c.AllAnsweredRatio == nil || *c.AllAnsweredRatio != 0.5 {
		t.Fatalf("flash comparison on etcd: %+v", c)
	}
	if c := s.SaleComparisons[2]; c.Scenario != scenarioMixed || c.Backend != backendRedlock || c.DuringP99Ratio == nil || *c.DuringP99Ratio != 0.4 || c.AllAnsweredRatio == nil || *c.AllAnsweredRatio != 0.5 {
		t.Fatalf("mixed comparison: %+v", c)
	}
}
