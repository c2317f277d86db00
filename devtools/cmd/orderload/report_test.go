package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/benchkit"
)

// TestSideFigures: the rate is the window's 201s over its length, the
// percentiles nearest rank over the 201s of every client.
func TestSideFigures(t *testing.T) {
	t0 := time.Unix(1000, 0)
	w := window{start: t0, end: t0.Add(2 * time.Second)}
	var a, b tally
	for i := 1; i <= 100; i++ {
		tl := &a
		if i%2 == 0 {
			tl = &b
		}
		tl.record(i, answer{kind: kindCreated}, true, time.Duration(i)*time.Millisecond)
	}
	a.record(200, classify(503, "service_unavailable", false), true, 0)
	b.record(201, noAnswer(true, false), true, 2*time.Second)
	b.record(202, classify(500, "internal_error", false), true, 0)
	f := sideFigures(side{name: sidePopular, users: make([]user, 2)}, []*tally{&a, &b}, w)
	if f.Clients != 2 || f.Created != 100 || f.OrdersPerS != 50 || f.ShedNoRA != 1 || f.Timeouts != 1 || f.Other != 1 ||
		f.OtherKinds["500 internal_error"] != 1 {
		t.Fatalf("figures %+v", f)
	}
	if f.Latency.P50ns != int64(50*time.Millisecond) || f.Latency.P99ns != int64(99*time.Millisecond) || f.Latency.Count != 100 {
		t.Fatalf("latency %+v", f.Latency)
	}
}

func sampleRun(label string, distinctRate, popularRate float64, ok bool) runJSON {
	return runJSON{Label: label, Instances: 3, Distinct: 66, Popular: 300, WarmupS: 2, WindowS: 8, TimeoutS: 2, Sent: 10, Answered: 10, Settled: true,
		Sides: []sideJSON{
			{Side: sideDistinct, Clients: 66, Created: 800, OrdersPerS: distinctRate, Latency: latency(80*time.Millisecond, 300*time.Millisecond)},
			{Side: sidePopular, Clients: 300, Created: 900, OrdersPerS: popularRate, Latency: latency(1600*time.Millisecond, 1900*time.Millisecond),
				ShedRA: 99, Timeouts: 347, Other: 2, OtherKinds: map[string]int{"transport error": 2}, FirstError: "connection reset"},
		},
		Check: checkResult{OK: ok, Orders: 1700, Created: 1700, Products: 67, Problem: map[bool]string{false: "2 201 answers without an order"}[ok]}}
}

func latency(p50, p99 time.Duration) (s benchkit.LatencyStats) {
	s.Count, s.P50ns, s.P99ns = 1, int64(p50), int64(p99)
	return s
}

func TestReportTable(t *testing.T) {
	var out bytes.Buffer
	report(&out, sampleRun("auto/mixed", 174.4, 139.6, true))
	got := out.String()
	for _, want := range []string{
		"### auto/mixed: 3 instances, 8 s window after 2 s warm-up, client timeout 2 s",
		tableHeader,
		"| distinct | 66 | 174 | 80ms | 300ms | 0 | 0 | 0 | 0 | 0 |\n",
		"| popular | 300 | 140 | 1.6s | 1.9s | 0 | 99 | 0 | 347 | 2 |\n",
		"popular, other answers: transport error ×2\n",
		"popular, first error: connection reset\n",
		"check ok: 1700 orders",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	out.Reset()
	r := sampleRun("", 1, 1, false)
	r.Settled, r.Answered = false, 7
	report(&out, r)
	if got := out.String(); !strings.Contains(got, "### orderload:") || !strings.Contains(got, "check FAILED: 2 201 answers without an order") ||
		!strings.Contains(got, "answered 7 of the 10 requests") {
		t.Errorf("report:\n%s", got)
	}
}

// TestSummary: the summary reads the -json files back and compares each
// run with off in the same shape, side by side.
func TestSummary(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for _, r := range []runJSON{sampleRun("auto/mixed", 400, 280, true), sampleRun("off/mixed", 100, 350, true), sampleRun("auto/popular", 900, 900, false)} {
		p := filepath.Join(dir, strings.ReplaceAll(r.Label, "/", "-")+".json")
		if err := writeJSON(p, r); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	var out bytes.Buffer
	if code := run(t.Context(), append([]string{"summary"}, paths...), nil, &out, &out); code != 0 {
		t.Fatalf("status %d: %s", code, out.String())
	}
	got := out.String()
	for _, want := range []string{
		summaryHeader,
		"| auto/mixed | distinct | 66 | 400 | 4.00 | 80ms | 300ms | 0 | 0 | 0 | 0 | 0 | ok |\n",
		"| auto/mixed | popular | 300 | 280 | 0.80 | 1.6s | 1.9s | 0 | 99 | 0 | 347 | 2 | ok |\n",
		"| off/mixed | popular | 300 | 350 | 1.00 |",
		"| auto/popular | popular | 300 | 900 | - |",
		"| FAILED |\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
}
