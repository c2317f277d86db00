package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/devtools/audit"
	"github.com/quorumlock/quorumlock/orders/watchdog"
)

// Three instances' /metrics, as ordersd exposes them: one created the
// order, the others replayed it; instance 3 has no watchdog.
var demoScrapes = []string{`# TYPE orders_place_total counter
orders_place_total{outcome="created"} 1
orders_place_total{outcome="fingerprint_mismatch"} 1
# TYPE orders_idempotency_claims_total counter
orders_idempotency_claims_total{outcome="CREATED"} 1
# TYPE quorumlock_acquire_total counter
quorumlock_acquire_total{result="acquired"} 1
quorumlock_acquire_total{result="not_acquired"} 0
# TYPE quorumlock_acquire_duration_seconds histogram
quorumlock_acquire_duration_seconds_bucket{result="acquired",le="0.01"} 1
quorumlock_acquire_duration_seconds_bucket{result="acquired",le="+Inf"} 1
quorumlock_acquire_duration_seconds_sum{result="acquired"} 0.004
quorumlock_acquire_duration_seconds_count{result="acquired"} 1
# TYPE orders_http_request_duration_seconds histogram
orders_http_request_duration_seconds_bucket{route="POST /orders/{id}/pay",code="200",le="+Inf"} 1
orders_http_request_duration_seconds_sum{route="POST /orders/{id}/pay",code="200"} 0.1
orders_http_request_duration_seconds_count{route="POST /orders/{id}/pay",code="200"} 1
orders_http_request_duration_seconds_bucket{route="POST /orders",code="201",le="+Inf"} 1
orders_http_request_duration_seconds_sum{route="POST /orders",code="201"} 0.1
orders_http_request_duration_seconds_count{route="POST /orders",code="201"} 1
# TYPE orders_invariant_violations gauge
orders_invariant_violations{check="non_negative_stock"} 0
orders_invariant_violations{check="stock_balance"} 2
# TYPE orders_invariant_check_errors_total counter
orders_invariant_check_errors_total 0
`, `# TYPE orders_place_total counter
orders_place_total{outcome="replayed"} 1
orders_place_total{outcome="stale_fence"} 1
# TYPE orders_idempotency_claims_total counter
orders_idempotency_claims_total{outcome="IN_PROGRESS"} 1
orders_idempotency_claims_total{outcome="SUCCESS"} 1
# TYPE quorumlock_acquire_total counter
quorumlock_acquire_total{result="acquired"} 3
# TYPE quorumlock_acquire_duration_seconds histogram
quorumlock_acquire_duration_seconds_bucket{result="acquired",le="+Inf"} 3
quorumlock_acquire_duration_seconds_sum{result="acquired"} 0.008
quorumlock_acquire_duration_seconds_count{result="acquired"} 3
# TYPE orders_lock_fallback_total counter
orders_lock_fallback_total{mode="db"} 2
# TYPE orders_http_request_duration_seconds histogram
orders_http_request_duration_seconds_bucket{route="POST /orders/{id}/pay",code="202",le="+Inf"} 2
orders_http_request_duration_seconds_sum{route="POST /orders/{id}/pay",code="202"} 0.1
orders_http_request_duration_seconds_count{route="POST /orders/{id}/pay",code="202"} 2
# TYPE orders_invariant_violations gauge
orders_invariant_violations{check="non_negative_stock"} 0
orders_invariant_violations{check="stock_balance"} 1
# TYPE orders_invariant_check_errors_total counter
orders_invariant_check_errors_total 3
`, `# TYPE orders_place_total counter
orders_place_total{outcome="replayed"} 1
`}

// The operator's table adds counters up, takes the largest of a gauge,
// averages a histogram, shows 0 for a counter never incremented and "-"
// where an instance has no such series.
func TestOperatorTable(t *testing.T) {
	var sets []metricSet
	for i, text := range demoScrapes {
		set, err := parseMetrics(strings.NewReader(text))
		if err != nil {
			t.Fatalf("scrape %d: %v", i, err)
		}
		sets = append(sets, set)
	}
	var b strings.Builder
	writeMetricTable(&b, []string{"ordersd1", "ordersd2", "ordersd3"}, sets, operatorGroups(sets))
	table := b.String()
	t.Logf("\n%s", table)
	for _, want := range [][]string{
		{`outcome="created"`, "1", "0", "0", "1"},
		{`outcome="replayed"`, "0", "1", "1", "2"},
		{`outcome="fingerprint_mismatch"`, "1", "0", "0", "1"},
		{`outcome="stale_fence"`, "0", "1", "0", "1"},
		{`outcome="CREATED"`, "1", "0", "0", "1"},
		{`outcome="IN_PROGRESS"`, "0", "1", "0", "1"},
		{`result="acquired"`, "1", "3", "0", "4"},
		{`result="not_acquired"`, "0", "0", "0", "0"},
		{`result="acquired"`, "4ms", "2.67ms", "-", "3ms"}, // (4+8)ms / 4
		{`mode="db"`, "0", "2", "0", "2"},
		{`mode="reject"`, "0", "0", "0", "0"},
		{`all reasons`, "0", "0", "0", "0"},
		{`route="POST /orders/{id}/pay",code="200"`, "1", "0", "0", "1"},
		{`route="POST /orders/{id}/pay",code="202"`, "0", "2", "0", "2"},
		{`check="non_negative_stock"`, "0", "0", "-", "0"},
		{`check="stock_balance"`, "2", "1", "-", "2"},
		{`check="` + watchdog.CheckStuckPaying + `"`, "-", "-", "-", "-"},
		{`all rounds`, "0", "3", "0", "3"},
	} {
		re := `(?m)^ {4}` + regexp.QuoteMeta(want[0]) + `\s+` + strings.Join(quoteAll(want[1:]), `\s+`) + `$`
		if !regexp.MustCompile(re).MatchString(table) {
			t.Errorf("no row %q in the table", want)
		}
	}
	// Only the payment routes, and only label values some instance has.
	for _, absent := range []string{`route="POST /orders",`, `result="unavailable"`, `outcome="TAKEOVER"`} {
		if strings.Contains(table, absent) {
			t.Errorf("the table shows %s:\n%s", absent, table)
		}
	}
	// stale_fence has a group of its own, not a row among the orders placed.
	if n := strings.Count(table, `outcome="stale_fence"`); n != 1 {
		t.Errorf("stale_fence shown %d times, want once", n)
	}
	// Every row is as wide as the header: the columns line up.
	lines := strings.Split(strings.TrimRight(table, "\n"), "\n")
	width := len(lines[0])
	for _, l := range lines[1:] {
		if strings.HasPrefix(l, "    ") && len(l) != width {
			t.Errorf("row %q is %d wide, the header %d", l, len(l), width)
		}
	}
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = regexp.QuoteMeta(s)
	}
	return out
}

// scrapeFresh polls until every instance exports the gauge of every check,
// and not before the time it is given.
func TestScrapeFreshWaitsForTheWatchdog(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "# TYPE orders_place_total counter\norders_place_total{outcome=\"created\"} 1")
		if hits.Add(1) <= 3 {
			return // no watchdog round yet
		}
		fmt.Fprintln(w, "# TYPE orders_invariant_violations gauge")
		for _, c := range watchdog.Checks() {
			fmt.Fprintf(w, "orders_invariant_violations{check=%q} 0\n", c)
		}
	}))
	defer srv.Close()
	procs := []*ordersdProc{{name: "a", url: srv.URL}, {name: "b", url: srv.URL}}
	start := time.Now()
	sets, err := scrapeFresh(context.Background(), procs, start.Add(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("scrapeFresh returned after %v, before the time it was given", d)
	}
	for i, set := range sets {
		if _, ok := set.sum(metricInvariantViolations, map[string]string{"check": watchdog.CheckStuckPaying}); !ok {
			t.Errorf("scrape %d has no gauge", i)
		}
	}
	if n := hits.Load(); n < 5 {
		t.Errorf("%d scrapes, want polls until both instances export the gauge", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := scrapeFresh(ctx, procs, time.Now().Add(time.Hour)); err == nil {
		t.Error("scrapeFresh ignored a cancelled context")
	}
}

func TestParseMetricsRejectsGarbage(t *testing.T) {
	if _, err := parseMetrics(strings.NewReader("orders_place_total{outcome=\"created\" 1\n")); err == nil {
		t.Fatal("a broken exposition parsed")
	}
}

// runQuorumctl runs the binary as its own process: the header line, then
// its standard output and error; the environment as a process started
// with it sees it (the last entry of a name wins, a value may hold "=" or
// be empty); nothing on its standard input; a failure names the command.
func TestRunQuorumctl(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "quorumctl")
	script := `#!/bin/sh
echo "args: $*"
echo "A=$A B=$B EMPTY=[$EMPTY] MISSING=[${MISSING-unset}]"
echo "on stderr" >&2
if read -r line; then echo "stdin: $line"; fi
if [ "$1" = fail ]; then exit 3; fi
`
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"A=1", "B=x=y", "A=2", "EMPTY="}
	var out strings.Builder
	if err := runQuorumctl(context.Background(), bin, env, []string{"inspect", demoStockKey}, &out); err != nil {
		t.Fatalf("runQuorumctl: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"\n$ quorumctl inspect stock:42\nargs: inspect stock:42\n",
		"A=2 B=x=y EMPTY=[] MISSING=[unset]\n",
		"on stderr\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "stdin:") {
		t.Errorf("quorumctl read something on its standard input:\n%s", out.String())
	}

	out.Reset()
	err := runQuorumctl(context.Background(), bin, env, []string{"fail", "now"}, &out)
	if err == nil || !strings.Contains(err.Error(), "quorumctl fail now: exit status 3") {
		t.Errorf("a failing quorumctl gave %v, want an error naming the command and its exit status", err)
	}
	if !strings.Contains(out.String(), "$ quorumctl fail now\nargs: fail now\n") {
		t.Errorf("the output of a failing quorumctl is missing:\n%s", out.String())
	}
	if err := runQuorumctl(context.Background(), filepath.Join(t.TempDir(), "none"), env, []string{"status"}, &out); err == nil {
		t.Error("a missing binary ran")
	}
}

// The demo on a bed, end to end: it ends with the operator's view, whose
// values are the run's: one order created in all, the stock lock taken and
// free again, no fence rejected, no invariant broken.
func TestDemoOnBed(t *testing.T) {
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build ordersd and quorumctl: %v", err)
	}
	dir := t.TempDir()
	bins := map[string]string{}
	for _, name := range []string{"ordersd", "quorumctl", "shipper"} {
		bins[name] = filepath.Join(dir, name)
		if out, err := exec.Command(gocmd, "build", "-o", bins[name], "github.com/quorumlock/quorumlock/cmd/"+name).CombinedOutput(); err != nil {
			t.Fatalf("go build ./cmd/%s: %v\n%s", name, err, out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var out strings.Builder
	start := time.Now()
	err = run(ctx, []string{"demo", "-ordersd", bins["ordersd"], "-quorumctl", bins["quorumctl"], "-shipper", bins["shipper"]}, os.Environ(), strings.NewReader(""), &out, &out)
	t.Logf("demo took %v", time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	// The audit says what it checked, over what.
	if !strings.Contains(out.String(), "audit: "+strings.Join(audit.Checks(), ", ")+" over 1 order row and 3 answers: no violations\n") {
		t.Errorf("the audit line does not name its checks and what they covered:\n%s", out.String())
	}
	// The cart bought twice at once: one sold whole, one refused naming
	// both lines, nothing left, nothing sold in part.
	cart := regexp.MustCompile(`(?s)u200[12] <- 201 .*u200[12] <- 409 .*"shortItems":\[\{"productId":"7","quantity":1,"available":0\},\{"productId":"9","quantity":1,"available":0\}\]`)
	if !cart.MatchString(out.String()) || !strings.Contains(out.String(), "cart orders in Postgres: 1, stock left: 7=0 9=0\naudit: ") {
		t.Errorf("the cart part does not show one cart sold and one refused:\n%s", out.String())
	}
	// The paid order's event, delivered twice, made one shipment.
	ship := regexp.MustCompile(`(?s)shipments for the order: (\d+)\n.*the same event added again as entry.*events_consumed_total\{result="duplicate"\} (\d+).*\n  shipments for the order: (\d+)\n`).FindStringSubmatch(out.String())
	if ship == nil || ship[1] != "1" || ship[2] == "0" || ship[3] != "1" {
		t.Errorf("the shipping part does not show one shipment before and after a duplicate delivery: %q\n%s", ship, out.String())
	}
	const head = "=== the operator's view, after the run ==="
	_, view, ok := strings.Cut(out.String(), head)
	if !ok {
		t.Fatalf("the demo printed no operator's view:\n%s", out.String())
	}
	t.Logf("%s%s", head, view)

	// row returns the per-instance values and the total of the row label
	// in the group whose title starts with group.
	row := func(group, label string) ([]int, int) {
		t.Helper()
		_, rest, ok := strings.Cut(view, "\n  "+group)
		if !ok {
			t.Fatalf("no group %q in the operator's view", group)
		}
		// The group ends at the next title, indented by two spaces, not four.
		if loc := regexp.MustCompile(`\n  \S`).FindStringIndex(rest); loc != nil {
			rest = rest[:loc[0]]
		}
		m := regexp.MustCompile(`(?m)^ {4}` + regexp.QuoteMeta(label) + `\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)$`).FindStringSubmatch(rest)
		if m == nil {
			t.Fatalf("no row %s under %q in:\n%s", label, group, view)
		}
		var vals []int
		for _, s := range m[1:] {
			n, err := strconv.Atoi(s)
			if err != nil {
				t.Fatalf("row %s under %q: %q is not a count", label, group, s)
			}
			vals = append(vals, n)
		}
		return vals[:3], vals[3]
	}
	wantTotal := func(group, label string, want int) {
		t.Helper()
		per, total := row(group, label)
		if sum := per[0] + per[1] + per[2]; total != want || sum != want {
			t.Errorf("%s %s: instances %v, all %d; want %d in all", group, label, per, total, want)
		}
	}
	// Every answer is counted where a reader of orders_place_total looks
	// for it: two orders created, one cart out of stock, two replays, one
	// refused key.
	wantTotal("POST /orders answers", `outcome="created"`, 2)      // the seed's order and one cart
	wantTotal("POST /orders answers", `outcome="out_of_stock"`, 1) // the other cart
	wantTotal("POST /orders answers", `outcome="replayed"`, 2)
	wantTotal("POST /orders answers", `outcome="fingerprint_mismatch"`, 1)
	wantTotal("fence rejections", `outcome="stale_fence"`, 0)
	wantTotal("idempotency claims", `outcome="CREATED"`, 3)
	wantTotal("fallbacks to Postgres", `mode="db"`, 0)
	wantTotal("leases lost", "all reasons", 0)
	wantTotal("failed watchdog rounds", "all rounds", 0)
	if _, n := row("stock lock acquisitions", `result="acquired"`); n < 1 {
		t.Errorf("the stock lock was acquired %d times, want at least once", n)
	}
	for _, c := range watchdog.Checks() {
		if per, max := row("invariant violations", fmt.Sprintf("check=%q", c)); max != 0 || per[0] != 0 || per[1] != 0 || per[2] != 0 {
			t.Errorf("invariant %s: %v rows on the instances, want 0 on each", c, per)
		}
	}
	if !regexp.MustCompile(`(?m)^ {4}result="acquired"\s+(\S+\s+){3}[0-9.]+(µs|ms|s)$`).MatchString(view) {
		t.Errorf("no mean lock wait of the acquisitions in:\n%s", view)
	}
	for _, want := range []string{
		"$ quorumctl status\n",
		"quorum: 5 of 5 reachable, 5 may vote, 3 needed: the lock can be taken",
		"database: postgres://",
		"$ quorumctl inspect stock:42\n",
		`key "stock:42"`,
		"not held: no token is on a majority of the 5 masters (3 needed)",
		"$ quorumctl invariants\ninvariants: none broken\n",
	} {
		if !strings.Contains(view, want) {
			t.Errorf("the operator's view lacks %q:\n%s", want, view)
		}
	}
	if n := regexp.MustCompile(`(?m)^127\.0\.0\.1:\d+\s+absent\s+-$`).FindAllString(view, -1); len(n) != 5 {
		t.Errorf("inspect shows stock:42 absent on %d masters, want 5:\n%s", len(n), view)
	}
}
