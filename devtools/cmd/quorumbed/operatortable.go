package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/orders/watchdog"
)

// The metrics the operator's view shows (orders/internal/metrics,
// quorum/quorumprom, orders/watchdog).
const (
	metricPlace               = "orders_place_total"
	metricClaims              = "orders_idempotency_claims_total"
	metricFallback            = "orders_lock_fallback_total"
	metricAcquire             = "quorumlock_acquire_total"
	metricAcquireDuration     = "quorumlock_acquire_duration_seconds"
	metricLeaseLost           = "quorumlock_lease_lost_total"
	metricRequests            = "orders_http_request_duration_seconds"
	metricInvariantViolations = "orders_invariant_violations"
	metricInvariantErrors     = "orders_invariant_check_errors_total"
)

// Routes of the payment requests, as orders_http_request_duration_seconds
// labels them.
const (
	routePay      = "POST /orders/{id}/pay"
	routeCallback = "POST /payments/callback"
)

// How a row of the operator's table combines its instances.
const (
	rowSum  = iota // a counter: the instances add up
	rowMax         // a gauge of one shared database: the largest
	rowMean        // a histogram's mean: sum of sums over sum of counts
)

// metricRow is one line of the operator's table: a series, or a set of
// series summed, on every instance.
type metricRow struct {
	label string
	kind  int
	name  string            // the metric (for rowMean, the histogram's name)
	match map[string]string // the series of name that the row adds up
}

// metricGroup is a titled block of rows.
type metricGroup struct {
	title string
	rows  []metricRow
}

// operatorGroups picks the rows of the operator's table from the scrapes:
// every label value any instance exports, and always the few an operator
// must see even at zero (orders created, stale fences, fallbacks).
func operatorGroups(sets []metricSet) []metricGroup {
	placeOrder := []string{"created", "replayed", "in_progress", "out_of_stock", "fingerprint_mismatch", "unknown_product",
		"stale_fence", "lock_busy", "lock_unavailable", "shed", "cancelled", "invalid", "error"}
	places := slices.DeleteFunc(seenValues(sets, metricPlace, "outcome", []string{"created"}, placeOrder), func(v string) bool { return v == "stale_fence" })
	claimOrder := []string{"CREATED", "IN_PROGRESS", "SUCCESS", "FINGERPRINT_MISMATCH", "TAKEOVER", "UNAVAILABLE"}
	acquireOrder := []string{"acquired", "not_acquired", "unavailable", "canceled", "error"}
	waits := acquireWaits(sets, acquireOrder)
	checks := watchdog.Checks()
	return []metricGroup{
		{"POST /orders answers, by the outcome that decided them (" + metricPlace + ")", byLabel(rowSum, metricPlace, "outcome", places, nil)},
		{"fence rejections (" + metricPlace + ")", byLabel(rowSum, metricPlace, "outcome", []string{"stale_fence"}, nil)},
		{"idempotency claims, by outcome (" + metricClaims + ")", byLabel(rowSum, metricClaims, "outcome", seenValues(sets, metricClaims, "outcome", nil, claimOrder), nil)},
		{"stock lock acquisitions, by result (" + metricAcquire + ")", byLabel(rowSum, metricAcquire, "result", seenValues(sets, metricAcquire, "result", []string{"acquired"}, acquireOrder), nil)},
		{"stock lock wait, mean per acquisition (" + metricAcquireDuration + ")", byLabel(rowMean, metricAcquireDuration, "result", waits, nil)},
		{"leases lost while held (" + metricLeaseLost + ")", []metricRow{{label: "all reasons", kind: rowSum, name: metricLeaseLost}}},
		{"fallbacks to Postgres when the lock was out of reach (" + metricFallback + ")", byLabel(rowSum, metricFallback, "mode", seenValues(sets, metricFallback, "mode", []string{"db", "reject"}, []string{"db", "reject"}), nil)},
		{"payment requests and provider callbacks, by status (" + metricRequests + "_count)", paymentRows(sets)},
		{"invariant violations, rows per check at the last round (" + metricInvariantViolations + ")", byLabel(rowMax, metricInvariantViolations, "check", seenValues(sets, metricInvariantViolations, "check", checks, checks), nil)},
		{"failed watchdog rounds (" + metricInvariantErrors + ")", []metricRow{{label: "all rounds", kind: rowSum, name: metricInvariantErrors}}},
	}
}

// seenValues returns always and every value label takes in the series of
// name on any instance, in the order of order (the values it does not
// name last, alphabetically).
func seenValues(sets []metricSet, name, label string, always, order []string) []string {
	seen := slices.Clone(always)
	for _, s := range sets {
		for _, v := range s.labelValues(name, label) {
			if !slices.Contains(seen, v) {
				seen = append(seen, v)
			}
		}
	}
	rank := func(v string) int {
		if i := slices.Index(order, v); i >= 0 {
			return i
		}
		return len(order)
	}
	slices.SortFunc(seen, func(a, b string) int {
		if d := rank(a) - rank(b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return seen
}

// byLabel returns a row of kind for each value of label in vals, on the
// metric name, its series narrowed further by extra.
func byLabel(kind int, name, label string, vals []string, extra map[string]string) []metricRow {
	var rows []metricRow
	for _, v := range vals {
		match := map[string]string{label: v}
		lbl := fmt.Sprintf("%s=%q", label, v)
		for k, ev := range extra {
			match[k] = ev
			lbl = fmt.Sprintf("%s=%q,%s", k, ev, lbl)
		}
		rows = append(rows, metricRow{label: lbl, kind: kind, name: name, match: match})
	}
	return rows
}

// acquireWaits returns the lock results, in order, that some instance
// timed at least once.
func acquireWaits(sets []metricSet, order []string) []string {
	var waits []string
	for _, r := range seenValues(sets, metricAcquireDuration+"_count", "result", nil, order) {
		for _, s := range sets {
			if n, _ := s.sum(metricAcquireDuration+"_count", map[string]string{"result": r}); n > 0 {
				waits = append(waits, r)
				break
			}
		}
	}
	return waits
}

// paymentRows returns a row per status code of the payment requests, then
// of the provider's callbacks.
func paymentRows(sets []metricSet) []metricRow {
	var rows []metricRow
	for _, route := range []string{routePay, routeCallback} {
		var codes []string
		for _, s := range sets {
			for _, sr := range s[metricRequests+"_count"] {
				if c := sr.labels["code"]; sr.labels["route"] == route && !slices.Contains(codes, c) {
					codes = append(codes, c)
				}
			}
		}
		slices.Sort(codes)
		rows = append(rows, byLabel(rowSum, metricRequests+"_count", "code", codes, map[string]string{"route": route})...)
	}
	return rows
}

// cells returns the row's value on every instance and over all of them,
// rendered; "-" where there is nothing to show.
func (r metricRow) cells(sets []metricSet) []string {
	out := make([]string, 0, len(sets)+1)
	var total, sums, counts float64
	seen := false
	for _, s := range sets {
		switch r.kind {
		case rowMean:
			sum, _ := s.sum(r.name+"_sum", r.match)
			n, _ := s.sum(r.name+"_count", r.match)
			sums, counts = sums+sum, counts+n
			out = append(out, meanCell(sum, n))
		case rowMax:
			v, ok := s.sum(r.name, r.match)
			if !ok {
				out = append(out, "-")
				continue
			}
			if !seen || v > total {
				total = v
			}
			seen = true
			out = append(out, strconv.FormatFloat(v, 'f', -1, 64))
		default:
			v, _ := s.sum(r.name, r.match) // a counter never incremented is 0
			total += v
			seen = true
			out = append(out, strconv.FormatFloat(v, 'f', -1, 64))
		}
	}
	switch {
	case r.kind == rowMean:
		out = append(out, meanCell(sums, counts))
	case !seen:
		out = append(out, "-")
	default:
		out = append(out, strconv.FormatFloat(total, 'f', -1, 64))
	}
	return out
}

// meanCell renders sum/n seconds as a duration, or "-" when n is 0.
func meanCell(sum, n float64) string {
	if n == 0 {
		return "-"
	}
	d := time.Duration(sum / n * float64(time.Second))
	return d.Round(10 * time.Microsecond).String()
}

// noSeries labels the row of a group that no instance has a series of.
const noSeries = "(no series)"

// writeMetricTable prints the groups as one table: a title line per group,
// then its rows indented, with one right-aligned column per instance (the
// scrapes of sets, named by names) and a last column over all of them.
func writeMetricTable(out io.Writer, names []string, sets []metricSet, groups []metricGroup) {
	heads := append(slices.Clone(names), "all")
	widths := make([]int, len(heads))
	for i, h := range heads {
		widths[i] = len(h)
	}
	labelWidth := 0
	cells := make([][][]string, len(groups))
	for g, grp := range groups {
		if len(grp.rows) == 0 {
			labelWidth = max(labelWidth, len(noSeries))
		}
		for _, r := range grp.rows {
			c := r.cells(sets)
			for i, v := range c {
				widths[i] = max(widths[i], len(v))
			}
			labelWidth = max(labelWidth, len(r.label))
			cells[g] = append(cells[g], c)
		}
	}
	line := func(label string, cols []string) {
		var b strings.Builder
		fmt.Fprintf(&b, "    %-*s", labelWidth, label)
		for i, v := range cols {
			fmt.Fprintf(&b, "  %*s", widths[i], v)
		}
		fmt.Fprintln(out, b.String())
	}
	line("", heads)
	for g, grp := range groups {
		fmt.Fprintf(out, "  %s\n", grp.title)
		if len(grp.rows) == 0 {
			line(noSeries, slices.Repeat([]string{"-"}, len(heads)))
		}
		for i, r := range grp.rows {
			line(r.label, cells[g][i])
		}
	}
}
