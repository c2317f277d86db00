package main

import (
	"regexp"
	"strings"
	"testing"

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
