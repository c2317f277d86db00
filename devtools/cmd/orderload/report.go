package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/internal/benchkit"
)

// runJSON is every figure of one invocation.
type runJSON struct {
	Label     string  `json:"label,omitempty"`
	Instances int     `json:"instances"`
	Distinct  int     `json:"distinct_clients"`
	Popular   int     `json:"popular_clients"`
	WarmupS   float64 `json:"warmup_s"`
	WindowS   float64 `json:"window_s"`
	TimeoutS  float64 `json:"client_timeout_s"`
	// Sent counts every request of the run; Answered how many of them the
	// instances had answered (their /metrics) when the check began, and
	// Settled whether that was all of them.
	Sent     int64       `json:"sent"`
	Answered int64       `json:"answered_by_instances"`
	Settled  bool        `json:"settled"`
	Sides    []sideJSON  `json:"sides"`
	Check    checkResult `json:"check"`
}

// sideJSON is one side's figures within the window.
type sideJSON struct {
	Side    string `json:"side"`
	Clients int    `json:"clients"`
	// Created counts the 201s within the window; OrdersPerS is that over
	// the window's length; Latency is of those 201s.
	Created    int                   `json:"created"`
	OrdersPerS float64               `json:"orders_per_s"`
	Latency    benchkit.LatencyStats `json:"latency_201"`
	Conflict   int                   `json:"status_409"`
	ShedRA     int                   `json:"status_503_retry_after"`
	ShedNoRA   int                   `json:"status_503_no_retry_after"`
	Timeouts   int                   `json:"timeouts"`
	Other      int                   `json:"other"`
	OtherKinds map[string]int        `json:"other_kinds,omitempty"`
	FirstError string                `json:"first_error,omitempty"`
}

// sideFigures sums the tallies of side s over the window w.
func sideFigures(s side, tallies []*tally, w window) sideJSON {
	f := sideJSON{Side: s.name, Clients: len(s.users)}
	var lat []time.Duration
	for _, t := range tallies {
		f.Created += t.counts[kindCreated]
		f.Conflict += t.counts[kindConflict]
		f.ShedRA += t.counts[kindShedRA]
		f.ShedNoRA += t.counts[kindShedNoRA]
		f.Timeouts += t.counts[kindTimeout]
		f.Other += t.counts[kindOther]
		lat = append(lat, t.latencies...)
		for k, n := range t.others {
			if f.OtherKinds == nil {
				f.OtherKinds = map[string]int{}
			}
			f.OtherKinds[k] += n
		}
		if f.FirstError == "" {
			f.FirstError = t.firstError
		}
	}
	if secs := w.end.Sub(w.start).Seconds(); secs > 0 {
		f.OrdersPerS = float64(f.Created) / secs
	}
	f.Latency = benchkit.Summarize(lat)
	return f
}

// tableHeader is the header of the per-run table.
const tableHeader = `| side | clients | orders/s | p50 (201) | p99 (201) | 409 | 503 with Retry-After | 503 without | timeouts | other |
|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|
`

// report prints one run: a heading, a row per side, what "other" was,
// and the check.
func report(out io.Writer, r runJSON) {
	name := r.Label
	if name == "" {
		name = "orderload"
	}
	fmt.Fprintf(out, "\n### %s: %d instances, %g s window after %g s warm-up, client timeout %g s\n\n", name, r.Instances, r.WindowS, r.WarmupS, r.TimeoutS)
	fmt.Fprint(out, tableHeader)
	for _, s := range r.Sides {
		fmt.Fprintf(out, "| %s | %d | %.0f | %s | %s | %d | %d | %d | %d | %d |\n", s.Side, s.Clients, s.OrdersPerS,
			benchkit.FormatLatency(s.Latency.P50ns, s.Latency.Count), benchkit.FormatLatency(s.Latency.P99ns, s.Latency.Count),
			s.Conflict, s.ShedRA, s.ShedNoRA, s.Timeouts, s.Other)
	}
	fmt.Fprintln(out)
	for _, s := range r.Sides {
		if s.Other > 0 {
			fmt.Fprintf(out, "%s, other answers: %s\n", s.Side, fmtKinds(s.OtherKinds))
		}
		if s.FirstError != "" {
			fmt.Fprintf(out, "%s, first error: %s\n", s.Side, s.FirstError)
		}
	}
	if !r.Settled {
		fmt.Fprintf(out, "the instances had answered %d of the %d requests sent when -settle ran out\n", r.Answered, r.Sent)
	}
	fmt.Fprintln(out, fmtCheck(r.Check))
}

// fmtKinds prints counts by label, sorted by label.
func fmtKinds(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// fmtCheck prints the check's verdict in one line.
func fmtCheck(c checkResult) string {
	if !c.OK {
		return "check FAILED: " + c.Problem
	}
	return fmt.Sprintf("check ok: %d orders in the database = %d 201 answers + %d of %d uncertain requests (timeouts) that took effect; %d products: none negative, available + sold = seeded; invariants hold",
		c.Orders, c.Created, c.UncertainCreated, c.Uncertain, c.Products)
}

// writeJSON writes r to path.
func writeJSON(path string, r runJSON) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// readRuns reads the -json files of several runs.
func readRuns(paths []string) ([]runJSON, error) {
	var runs []runJSON
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var r runJSON
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		runs = append(runs, r)
	}
	return runs, nil
}

// summaryHeader is the header of the summary table.
const summaryHeader = `| run | side | clients | orders/s | × off | p50 (201) | p99 (201) | 409 | 503 with Retry-After | 503 without | timeouts | other | check |
|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|
`

// summarize prints one table of runs, a row per side, in their order. A
// run labelled MODE/SHAPE is compared with the run labelled off/SHAPE:
// its orders/s over off's on the same side.
func summarize(out io.Writer, runs []runJSON) {
	offRate := map[string]float64{}
	for _, r := range runs {
		if mode, shape, ok := strings.Cut(r.Label, "/"); ok && mode == "off" {
			for _, s := range r.Sides {
				offRate[shape+"|"+s.Side] = s.OrdersPerS
			}
		}
	}
	fmt.Fprint(out, summaryHeader)
	for _, r := range runs {
		_, shape, _ := strings.Cut(r.Label, "/")
		check := "ok"
		if !r.Check.OK {
			check = "FAILED"
		}
		for _, s := range r.Sides {
			ratio := "-"
			if off, ok := offRate[shape+"|"+s.Side]; ok && off > 0 {
				ratio = fmt.Sprintf("%.2f", s.OrdersPerS/off)
			}
			fmt.Fprintf(out, "| %s | %s | %d | %.0f | %s | %s | %s | %d | %d | %d | %d | %d | %s |\n", r.Label, s.Side, s.Clients, s.OrdersPerS, ratio,
				benchkit.FormatLatency(s.Latency.P50ns, s.Latency.Count), benchkit.FormatLatency(s.Latency.P99ns, s.Latency.Count),
				s.Conflict, s.ShedRA, s.ShedNoRA, s.Timeouts, s.Other, check)
		}
	}
}
