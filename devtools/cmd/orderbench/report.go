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
	Provider   string `json:"provider"`
	RunID      string `json:"run_id"`
	Instances  int    `json:"instances"`
	RedisNodes int    `json:"redis_nodes"`
	// EtcdMembers is the etcd cluster's size (0: no run locked on etcd).
	EtcdMembers int              `json:"etcd_members,omitempty"`
	Config      configJSON       `json:"config"`
	Runs        []runJSON        `json:"runs"`
	Comparisons []comparisonJSON `json:"comparisons"`
	// SaleComparisons compares each lock backend with db in flash and
	// mixed.
	SaleComparisons []saleComparisonJSON `json:"sale_comparisons,omitempty"`
	// Postgres compares each closed-loop run on the single Postgres with
	// the same on the HA group (-postgres both).
	Postgres []postgresComparisonJSON `json:"postgres_comparisons,omitempty"`
	// HA is the HA group over the runs, when it ran.
	HA *haJSON `json:"ha,omitempty"`
}

// configJSON is the part of the command line and of the instances'
// settings that shapes the figures.
type configJSON struct {
	// Clients is the first closed-loop client count (mixed's);
	// ClientCounts all of them.
	Clients           int      `json:"clients"`
	ClientCounts      []int    `json:"client_counts"`
	DurationNs        int64    `json:"duration_ns"`
	WarmupNs          int64    `json:"warmup_ns"`
	LockWaitNs        int64    `json:"lock_wait_ns"`
	LockTTLns         int64    `json:"lock_ttl_ns"`
	ProcessingLeaseNs int64    `json:"processing_lease_ns"`
	RequestTimeoutNs  int64    `json:"request_timeout_ns"`
	PGConns           int      `json:"pg_conns"` // 0: the pgx default
	LockRule          string   `json:"lock_rule"`
	BusyBuyers        int      `json:"busy_buyers,omitempty"`
	Fsync             string   `json:"fsync"`
	Scenarios         []string `json:"scenarios"`
	Modes             []string `json:"modes"`
	// Backends are lock mode's backends, each a run of its own.
	Backends []string `json:"backends"`
	// Postgres are where the runs were made: single, ha or both in turn.
	Postgres []string `json:"postgres"`
	// HAClients is how the instances reached the HA group: proxy or
	// direct.
	HAClients string `json:"ha_clients,omitempty"`
	// Flash is the sale of flash and mixed, when one of them ran.
	Flash *flashConfigJSON `json:"flash,omitempty"`
	// Cart is the carts of cart, when it ran.
	Cart *cartConfigJSON `json:"cart,omitempty"`
}

// cartConfigJSON is what the cart scenario's carts hold: Lines distinct
// products of Products, one unit each, drawn from Seed.
type cartConfigJSON struct {
	Products int    `json:"products"`
	Lines    int    `json:"lines"`
	Seed     uint64 `json:"seed"`
}

// runJSON is one run. Requests, Created, the rates, the latencies and
// Other cover the closed-loop clients' measured window: requests sent and
// answered within it (for mixed, the window of the sale; none for flash).
// Sent and Check cover the whole run.
type runJSON struct {
	Scenario string `json:"scenario"`
	// Name is the scenario as the report names it: with the client count
	// for distinct, hot and cart ("hot/64").
	Name string `json:"name"`
	Mode string `json:"mode"`
	// Backend is lock mode's: redlock or etcd ("" in db mode).
	Backend        string                `json:"backend,omitempty"`
	Clients        int                   `json:"clients,omitempty"`
	WindowNs       int64                 `json:"window_ns"`
	Requests       int                   `json:"requests"`
	RequestsPerSec float64               `json:"requests_per_sec"`
	Created        int                   `json:"created"`
	CreatedPerSec  float64               `json:"created_per_sec"`
	Latency201     benchkit.LatencyStats `json:"latency_201"`
	Other          map[string]int        `json:"other_answers"`
	Sent           int                   `json:"sent_in_run"`
	FirstError     string                `json:"first_transport_error,omitempty"`
	// Check is the closed-loop clients' database check, flash's the
	// sale's.
	Check checkResult `json:"check"`
	Sale  *saleJSON   `json:"sale,omitempty"`
	Mixed *mixedJSON  `json:"mixed,omitempty"`
	Busy  *busyJSON   `json:"busy,omitempty"`
	// Postgres is where the run was made: single or ha. On ha,
	// PrimaryBefore and PrimaryAfter name the group's primary before and
	// after the run ("none" when the monitor named none).
	Postgres      string `json:"postgres"`
	PrimaryBefore string `json:"primary_before,omitempty"`
	PrimaryAfter  string `json:"primary_after,omitempty"`
	// CPU is the CPU split over the window (-cpu-split, closed loops).
	CPU *cpuSplitJSON `json:"cpu,omitempty"`
}

// comparisonJSON compares lock mode on one backend with db mode in one
// closed-loop scenario, by orders placed per second. Faster is the faster
// mode (lock or db); Ratio is its rate over the slower one's, absent when
// the slower placed none.
type comparisonJSON struct {
	Scenario          string   `json:"scenario"`
	Name              string   `json:"name"`
	Clients           int      `json:"clients,omitempty"`
	Backend           string   `json:"backend"`
	Postgres          string   `json:"postgres"`
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
			Clients: cfg.clients[0], ClientCounts: cfg.clients, DurationNs: int64(cfg.duration), WarmupNs: int64(cfg.warmup),
			LockWaitNs: int64(cfg.lockWait), LockTTLns: int64(lockTTL), ProcessingLeaseNs: int64(processingLease),
			RequestTimeoutNs: int64(cfg.requestTimeout), PGConns: cfg.poolConns, Fsync: cfg.fsync, LockRule: cfg.lockRule,
			Scenarios: cfg.scenarios, Modes: cfg.modes, Backends: cfg.backends, Postgres: cfg.postgres,
		},
		Runs: []runJSON{}, Comparisons: []comparisonJSON{},
	}
	if cfg.usesEtcd() {
		s.EtcdMembers = etcdMembers
	}
	if cfg.hasSale() {
		s.Config.Flash = flashConfigFigures(cfg.flash)
	}
	if slices.Contains(cfg.scenarios, scenarioBusy) {
		s.Config.BusyBuyers = cfg.busyBuyers
	}
	if slices.Contains(cfg.scenarios, scenarioCart) {
		s.Config.Cart = &cartConfigJSON{Products: cartProducts, Lines: cartLines, Seed: cfg.flash.seed}
	}
	for _, r := range res {
		s.Runs = append(s.Runs, runFigures(r))
	}
	if cfg.usesHA() {
		s.Config.HAClients = cfg.haClients
	}
	s.Comparisons = compareRates(s.Runs)
	s.SaleComparisons = compareSales(s.Runs)
	s.Postgres = comparePostgres(s.Runs)
	return s
}

// compareRates compares each lock backend with db in every closed-loop
// scenario that ran in both, by orders placed per second, in the order of
// the runs.
func compareRates(runs []runJSON) []comparisonJSON {
	out := []comparisonJSON{}
	for _, pair := range modePairs(runs, isClosedLoop) {
		lock, db := pair[0], pair[1]
		c := comparisonJSON{Scenario: lock.Scenario, Name: lock.Name, Clients: lock.Clients, Backend: lock.Backend, Postgres: lock.Postgres, Faster: modeLock,
			LockCreatedPerSec: lock.CreatedPerSec, DBCreatedPerSec: db.CreatedPerSec}
		hi, lo := lock.CreatedPerSec, db.CreatedPerSec
		if db.CreatedPerSec > lock.CreatedPerSec {
			c.Faster, hi, lo = modeDB, db.CreatedPerSec, lock.CreatedPerSec
		}
		if lo > 0 {
			c.Ratio = new(hi / lo)
		}
		out = append(out, c)
	}
	return out
}

// modePairs returns, for every scenario name that keep accepts and that
// ran in db mode, each of its lock runs (one per backend) with its db run,
// in the order the names first ran, and for each name in the order its
// lock runs ran.
func modePairs(runs []runJSON, keep func(scenario string) bool) [][2]runJSON {
	var names []string
	locks := map[string][]runJSON{}
	dbs := map[string]runJSON{}
	for _, r := range runs {
		if !keep(r.Scenario) {
			continue
		}
		// The runs of one name on each database pair apart.
		key := r.Name + " " + r.Postgres
		if _, seen := locks[key]; !seen {
			locks[key] = nil
			names = append(names, key)
		}
		if r.Mode == modeDB {
			dbs[key] = r
		} else {
			locks[key] = append(locks[key], r)
		}
	}
	var out [][2]runJSON
	for _, n := range names {
		db, ok := dbs[n]
		if !ok {
			continue
		}
		for _, lock := range locks[n] {
			out = append(out, [2]runJSON{lock, db})
		}
	}
	return out
}

// runFigures merges a run's tallies and sale.
func runFigures(r *runResult) runJSON {
	rj := runJSON{Scenario: r.scenario, Name: r.name(), Mode: r.mode, Backend: r.backend, Clients: r.clients, Other: map[string]int{}, Check: r.check,
		Postgres: r.postgres, PrimaryBefore: r.primaryBefore, PrimaryAfter: r.primaryAfter}
	if r.cpu != nil {
		rj.CPU = splitFigures(r.cpu)
	}
	var during phaseJSON
	if r.tallies != nil {
		during = phaseFigures(phase{window: r.window, tallies: r.tallies, peakConns: r.peakConns})
		rj.WindowNs, rj.Requests, rj.RequestsPerSec = during.WindowNs, during.Requests, during.RequestsPerSec
		rj.Created, rj.CreatedPerSec, rj.Latency201, rj.Other = during.Created, during.CreatedPerSec, during.Latency201, during.Other
	}
	tallies := r.tallies
	switch {
	case r.busy != nil:
		tallies = slices.Concat(tallies, r.alone.tallies, r.busy.together.tallies, r.busy.alone.tallies)
		rj.Busy = busyFigures(during, phaseFigures(*r.alone), phaseFigures(r.busy.together), phaseFigures(r.busy.alone))
	case r.alone != nil:
		tallies = slices.Concat(tallies, r.alone.tallies)
		rj.Mixed = mixedFigures(during, phaseFigures(*r.alone))
	}
	for _, t := range tallies {
		rj.Sent += t.sent
		if rj.FirstError == "" {
			rj.FirstError = t.firstError
		}
	}
	if r.sale != nil {
		rj.Sale = saleFigures(r.sale)
		rj.Sent += rj.Sale.Requests
		if rj.FirstError == "" {
			rj.FirstError = rj.Sale.FirstError
		}
	}
	return rj
}

// phaseJSON is one closed-loop load's measured window: requests sent and
// answered within it.
type phaseJSON struct {
	WindowNs       int64                 `json:"window_ns"`
	Requests       int                   `json:"requests"`
	RequestsPerSec float64               `json:"requests_per_sec"`
	Created        int                   `json:"created"`
	CreatedPerSec  float64               `json:"created_per_sec"`
	Latency201     benchkit.LatencyStats `json:"latency_201"`
	Other          map[string]int        `json:"other_answers"`
	// PeakDBConns is the peak of database connections in use, sampled
	// every 20ms in the window; -1 when not sampled.
	PeakDBConns int `json:"peak_db_conns"`
}

// phaseFigures merges the tallies of one closed-loop load.
func phaseFigures(p phase) phaseJSON {
	secs := p.window.end.Sub(p.window.start).Seconds()
	pj := phaseJSON{WindowNs: int64(p.window.end.Sub(p.window.start)), Other: map[string]int{}, PeakDBConns: p.peakConns}
	var lat []time.Duration
	for _, t := range p.tallies {
		for k, n := range t.inWindow {
			pj.Requests += n
			if k != answerCreated {
				pj.Other[k] += n
			}
		}
		pj.Created += t.created
		lat = append(lat, t.latencies...)
	}
	pj.RequestsPerSec = benchkit.Ratio(float64(pj.Requests), secs)
	pj.CreatedPerSec = benchkit.Ratio(float64(pj.Created), secs)
	pj.Latency201 = benchkit.Summarize(lat)
	return pj
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

// report prints the tables and the comparisons.
func report(out io.Writer, s summaryJSON) {
	c := s.Config
	pg := "the pgx default"
	if c.PGConns > 0 {
		pg = fmt.Sprint(c.PGConns)
	}
	fmt.Fprintf(out, "orderbench: POST /orders, %d in-process instances (loopback HTTP; own pgx pool, Redis clients, lock and idempotency store each),\n", s.Instances)
	fmt.Fprintf(out, "%d Redis masters and Postgres (%s); lock TTL %v, lock wait %v; pgx pool per instance: %s.\n",
		s.RedisNodes, s.Provider, time.Duration(c.LockTTLns), time.Duration(c.LockWaitNs), pg)
	fmt.Fprintln(out, "Modes: lock/redlock takes the stock lock on the Redis masters (quorum), lock/etcd on etcd (etcdlock, an etcd client per instance),")
	fmt.Fprintln(out, "both fenced from the one Postgres reserver; db takes no lock (Postgres arbitrates alone).")
	fmt.Fprintf(out, "Lock mode's rule: %s (contended: only the batches of contended products take the lock; always: every batch).\n", c.LockRule)
	if s.EtcdMembers > 0 {
		fmt.Fprintf(out, "etcd: %d members, which fsync their WAL on every commit (whatever the Redis appendfsync).\n", s.EtcdMembers)
	}
	if slices.Contains(c.Postgres, pgHA) {
		fmt.Fprintln(out, "Runs marked \"on ha\" are made on the bed's Postgres HA group (pg_auto_failover: a monitor, a primary and a synchronous standby):")
		fmt.Fprintln(out, "every commit returns once the standby has it too; the others on the bed's single Postgres.")
	}
	reportLoads(out, s)
	reportSales(out, s)
	reportMixed(out, s)
	reportBusy(out, s)
	if len(s.Comparisons) > 0 || len(s.SaleComparisons) > 0 {
		fmt.Fprintln(out)
	}
	reportComparisons(out, s.Comparisons)
	reportSaleComparisons(out, s.SaleComparisons)
	reportPostgres(out, s)
	reportCPU(out, s)
	reportHA(out, s)
	reportProblems(out, s.Runs)
}

// reportLoads prints the table of the closed-loop runs: distinct, hot and
// cart.
func reportLoads(out io.Writer, s summaryJSON) {
	var rows []runJSON
	for _, r := range s.Runs {
		if isClosedLoop(r.Scenario) {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return
	}
	c := s.Config
	fmt.Fprintln(out)
	fmt.Fprintf(out, "Closed loops (distinct, hot, cart): N clients (distinct/N) round-robin over the instances, each its own user, a fresh key per request;\n")
	fmt.Fprintf(out, "%v warm-up then %v measured per run.\n", time.Duration(c.WarmupNs), time.Duration(c.DurationNs))
	if k := c.Cart; k != nil {
		fmt.Fprintf(out, "cart: every request a cart of %d distinct products of %d (one unit each), picked at random (seed %d), lines in random order; an order is a cart.\n",
			k.Lines, k.Products, k.Seed)
	}
	fmt.Fprintln(out, "requests/s: answers of any status per second of the window; orders/s: 201 answers per second; latencies over the window's 201s;")
	fmt.Fprintln(out, "check: after the run the database holds exactly one order per 201 answer (warm-up included), with the lines asked for, and lost exactly that much stock;")
	fmt.Fprintln(out, "for cart also, per product: stock left + units in order_lines = stock seeded.")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| scenario | mode | requests/s | orders/s | p50 | p99 | p99.9 | other answers | check |")
	fmt.Fprintln(out, "|---|---|---:|---:|---:|---:|---:|---|---|")
	for _, r := range rows {
		l := r.Latency201
		fmt.Fprintf(out, "| %s | %s | %.0f | %.0f | %s | %s | %s | %s | %s |\n", r.Name, runLabel(r), r.RequestsPerSec, r.CreatedPerSec,
			benchkit.FormatLatency(l.P50ns, l.Count), benchkit.FormatLatency(l.P99ns, l.Count), benchkit.FormatLatency(l.P999ns, l.Count), fmtOther(r.Other), fmtCheck(r.Check))
	}
}

// reportComparisons prints, per closed-loop scenario and lock backend,
// whether lock mode on that backend or db placed orders faster.
func reportComparisons(out io.Writer, cmps []comparisonJSON) {
	for _, cmp := range cmps {
		lock := modeLabel(modeLock, cmp.Backend)
		faster, slower := lock, modeDB
		if cmp.Faster == modeDB {
			faster, slower = modeDB, lock
		}
		rates := fmt.Sprintf("(%s %.0f, db %.0f orders/s)", lock, cmp.LockCreatedPerSec, cmp.DBCreatedPerSec)
		name := cmp.Name + onHA(cmp.Postgres)
		if cmp.Ratio == nil {
			fmt.Fprintf(out, "- %s: only %s placed orders %s\n", name, faster, rates)
			continue
		}
		fmt.Fprintf(out, "- %s: %s placed orders %.2fx as fast as %s %s\n", name, faster, *cmp.Ratio, slower, rates)
	}
}

// runLabel names a run's mode as the report's tables do: with its backend
// and, on the HA group, "on ha".
func runLabel(r runJSON) string { return modeLabel(r.Mode, r.Backend) + onHA(r.Postgres) }

// onHA is " on ha" for a run on the HA group, else "".
func onHA(where string) string {
	if where == pgHA {
		return " on ha"
	}
	return ""
}

// reportProblems prints every run's first transport error and failed
// check.
func reportProblems(out io.Writer, runs []runJSON) {
	for _, r := range runs {
		if r.FirstError != "" {
			fmt.Fprintf(out, "\n%s/%s: first transport error: %s\n", r.Name, runLabel(r), r.FirstError)
		}
		for _, p := range runProblems(r) {
			fmt.Fprintf(out, "\n%s/%s: CHECK FAILED: %s\n", r.Name, runLabel(r), p)
		}
	}
}

// runProblems returns what a run's checks found wrong: the closed-loop
// clients' and, for mixed, the sale's (flash's check is the sale's).
func runProblems(r runJSON) []string {
	var out []string
	if !r.Check.OK {
		out = append(out, r.Check.Problem)
	}
	if r.Scenario == scenarioMixed && r.Sale != nil && !r.Sale.Check.OK {
		out = append(out, "the sale: "+r.Sale.Check.Problem)
	}
	return out
}

// checkFailures returns an error naming every run whose check failed.
func checkFailures(s summaryJSON) error {
	var errs []error
	for _, r := range s.Runs {
		for _, p := range runProblems(r) {
			errs = append(errs, fmt.Errorf("%s/%s: database check failed: %s", r.Name, runLabel(r), p))
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
