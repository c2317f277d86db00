package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/internal/benchkit"
)

// summaryJSON is every figure of a command run, as -json writes it.
// Durations are in nanoseconds.
type summaryJSON struct {
	Provider    string           `json:"provider"`
	RunID       string           `json:"run_id"`
	Instances   int              `json:"instances"`
	RedisNodes  int              `json:"redis_nodes"`
	Config      configJSON       `json:"config"`
	Runs        []runJSON        `json:"runs"`
	Comparisons []comparisonJSON `json:"comparisons"`
}

// configJSON is the part of the command line and of the instances'
// settings that shapes the figures.
type configJSON struct {
	Clients           int      `json:"clients"`
	DurationNs        int64    `json:"duration_ns"`
	WarmupNs          int64    `json:"warmup_ns"`
	LockWaitNs        int64    `json:"lock_wait_ns"`
	LockTTLns         int64    `json:"lock_ttl_ns"`
	ProcessingLeaseNs int64    `json:"processing_lease_ns"`
	RequestTimeoutNs  int64    `json:"request_timeout_ns"`
	PGConns           int      `json:"pg_conns"` // 0: the pgx default
	Fsync             string   `json:"fsync"`
	Scenarios         []string `json:"scenarios"`
	Modes             []string `json:"modes"`
}

// runJSON is one (scenario, mode) run. Requests, Created, the rates, the
// latencies and Other cover the measured window: requests sent and
// answered within it. Check covers the whole run.
type runJSON struct {
	Scenario       string                `json:"scenario"`
	Mode           string                `json:"mode"`
	WindowNs       int64                 `json:"window_ns"`
	Requests       int                   `json:"requests"`
	RequestsPerSec float64               `json:"requests_per_sec"`
	Created        int                   `json:"created"`
	CreatedPerSec  float64               `json:"created_per_sec"`
	Latency201     benchkit.LatencyStats `json:"latency_201"`
	Other          map[string]int        `json:"other_answers"`
	Sent           int                   `json:"sent_in_run"`
	FirstError     string                `json:"first_transport_error,omitempty"`
	Check          checkResult           `json:"check"`
}

// comparisonJSON compares the modes of one scenario by orders placed per
// second. Ratio is the faster mode's rate over the slower one's; it is
// absent when the slower placed none.
type comparisonJSON struct {
	Scenario          string   `json:"scenario"`
	Faster            string   `json:"faster"`
	Ratio             *float64 `json:"ratio,omitempty"`
	LockCreatedPerSec float64  `json:"lock_created_per_sec"`
	DBCreatedPerSec   float64  `json:"db_created_per_sec"`
}

// summarize computes every reported figure from the raw results.
func summarize(cfg config, provider, runID string, res []*runResult) summaryJSON {
	s := summaryJSON{
		Provider: provider, RunID: runID, Instances: instancesPerRun, RedisNodes: redisNodes,
		Config: configJSON{
			Clients: cfg.clients, DurationNs: int64(cfg.duration), WarmupNs: int64(cfg.warmup),
			LockWaitNs: int64(cfg.lockWait), LockTTLns: int64(lockTTL), ProcessingLeaseNs: int64(processingLease),
			RequestTimeoutNs: int64(cfg.requestTimeout), PGConns: cfg.poolConns, Fsync: cfg.fsync,
			Scenarios: cfg.scenarios, Modes: cfg.modes,
		},
		Runs: []runJSON{}, Comparisons: []comparisonJSON{},
	}
	rates := map[string]map[string]float64{}
	for _, r := range res {
		rj := runFigures(r)
		s.Runs = append(s.Runs, rj)
		if rates[r.scenario] == nil {
			rates[r.scenario] = map[string]float64{}
		}
		rates[r.scenario][r.mode] = rj.CreatedPerSec
	}
	for _, sc := range cfg.scenarios {
		lock, okL := rates[sc][modeLock]
		db, okD := rates[sc][modeDB]
		if !okL || !okD {
			continue
		}
		c := comparisonJSON{Scenario: sc, Faster: modeLock, LockCreatedPerSec: lock, DBCreatedPerSec: db}
		hi, lo := lock, db
		if db > lock {
			c.Faster, hi, lo = modeDB, db, lock
		}
		if lo > 0 {
			c.Ratio = new(hi / lo)
		}
		s.Comparisons = append(s.Comparisons, c)
	}
	return s
}

// runFigures merges a run's tallies.
func runFigures(r *runResult) runJSON {
	secs := r.window.end.Sub(r.window.start).Seconds()
	rj := runJSON{Scenario: r.scenario, Mode: r.mode, WindowNs: int64(r.window.end.Sub(r.window.start)),
		Other: map[string]int{}, Check: r.check}
	var lat []time.Duration
	for _, t := range r.tallies {
		for k, n := range t.inWindow {
			rj.Requests += n
			if k != answerCreated {
				rj.Other[k] += n
			}
		}
		rj.Created += t.created
		rj.Sent += t.sent
		lat = append(lat, t.latencies...)
		if rj.FirstError == "" {
			rj.FirstError = t.firstError
		}
	}
	rj.RequestsPerSec = float64(rj.Requests) / secs
	rj.CreatedPerSec = float64(rj.Created) / secs
	rj.Latency201 = benchkit.Summarize(lat)
	return rj
}

// writeJSON writes the figures to path.
func writeJSON(path string, s summaryJSON) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("-json: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("-json: %w", err)
	}
	return nil
}

// report prints the table and the comparisons.
func report(out io.Writer, s summaryJSON) {
	c := s.Config
	pg := "the pgx default"
	if c.PGConns > 0 {
		pg = fmt.Sprint(c.PGConns)
	}
	fmt.Fprintf(out, "orderbench: POST /orders, %d in-process instances (loopback HTTP; own pgx pool, Redis clients, lock and idempotency store each),\n", s.Instances)
	fmt.Fprintf(out, "%d Redis masters and Postgres (%s); %d clients round-robin over the instances, each its own user;\n", s.RedisNodes, s.Provider, c.Clients)
	fmt.Fprintf(out, "%v warm-up then %v measured per run; lock TTL %v, lock wait %v; pgx pool per instance: %s.\n",
		time.Duration(c.WarmupNs), time.Duration(c.DurationNs), time.Duration(c.LockTTLns), time.Duration(c.LockWaitNs), pg)
	fmt.Fprintln(out, "requests/s: answers of any status per second of the window; orders/s: 201 answers per second; latencies over the window's 201s;")
	fmt.Fprintln(out, "check: after the run the database holds exactly one order per 201 answer (warm-up included) and lost exactly that much stock.")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| scenario | mode | requests/s | orders/s | p50 | p99 | p99.9 | other answers | check |")
	fmt.Fprintln(out, "|---|---|---:|---:|---:|---:|---:|---|---|")
	for _, r := range s.Runs {
		l := r.Latency201
		fmt.Fprintf(out, "| %s | %s | %.0f | %.0f | %s | %s | %s | %s | %s |\n", r.Scenario, r.Mode, r.RequestsPerSec, r.CreatedPerSec,
			benchkit.FormatLatency(l.P50ns, l.Count), benchkit.FormatLatency(l.P99ns, l.Count), benchkit.FormatLatency(l.P999ns, l.Count), fmtOther(r.Other), fmtCheck(r.Check))
	}
	if len(s.Comparisons) > 0 {
		fmt.Fprintln(out)
	}
	for _, cmp := range s.Comparisons {
		slower := modeDB
		if cmp.Faster == modeDB {
			slower = modeLock
		}
		if cmp.Ratio == nil {
			fmt.Fprintf(out, "- %s: only %s placed orders (lock %.0f, db %.0f orders/s)\n", cmp.Scenario, cmp.Faster, cmp.LockCreatedPerSec, cmp.DBCreatedPerSec)
			continue
		}
		fmt.Fprintf(out, "- %s: %s placed orders %.2fx as fast as %s (lock %.0f, db %.0f orders/s)\n",
			cmp.Scenario, cmp.Faster, *cmp.Ratio, slower, cmp.LockCreatedPerSec, cmp.DBCreatedPerSec)
	}
	for _, r := range s.Runs {
		if r.FirstError != "" {
			fmt.Fprintf(out, "\n%s/%s: first transport error: %s\n", r.Scenario, r.Mode, r.FirstError)
		}
		if !r.Check.OK {
			fmt.Fprintf(out, "\n%s/%s: CHECK FAILED: %s\n", r.Scenario, r.Mode, r.Check.Problem)
		}
	}
}

// checkFailures returns an error naming every run whose check failed.
func checkFailures(s summaryJSON) error {
	var errs []error
	for _, r := range s.Runs {
		if !r.Check.OK {
			errs = append(errs, fmt.Errorf("%s/%s: database check failed: %s", r.Scenario, r.Mode, r.Check.Problem))
		}
	}
	return errors.Join(errs...)
}

// fmtOther prints the non-201 answer counts, most frequent first.
func fmtOther(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := slices.SortedFunc(maps.Keys(m), func(a, b string) int {
		if m[a] != m[b] {
			return m[b] - m[a]
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// fmtCheck prints a run's check.
func fmtCheck(c checkResult) string {
	extra := ""
	if c.Uncertain > 0 {
		extra = fmt.Sprintf(", %d uncertain of which %d took effect", c.Uncertain, c.UncertainCreated)
	}
	if !c.OK {
		return "FAILED"
	}
	return fmt.Sprintf("ok (%d orders%s)", c.Orders, extra)
}
