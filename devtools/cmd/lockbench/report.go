package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/internal/benchkit"
)

// runJSON is every figure of a run, as -json writes it. Durations are in
// nanoseconds.
type runJSON struct {
	Nodes int `json:"nodes"` // Redis nodes
	// EtcdMembers is the etcd cluster's size (0 when etcd did not run).
	EtcdMembers int            `json:"etcd_members,omitempty"`
	Provider    string         `json:"provider"`
	RunID       string         `json:"run_id"`
	Config      configJSON     `json:"config"`
	Scenarios   []scenarioJSON `json:"scenarios"`
	Notes       []string       `json:"notes,omitempty"`
	cfg         config
}

// configJSON is the part of the command line that shapes the figures.
type configJSON struct {
	Addrs     []string `json:"addrs,omitempty"`
	EtcdAddrs []string `json:"etcd_addrs,omitempty"`
	Fsync     string   `json:"fsync,omitempty"`
	Rounds    int      `json:"rounds"`
	Ops       int      `json:"ops"`
	TTLns     int64    `json:"ttl_ns"`
	// EtcdTTLns is the etcd contender's session TTL: -etcd-ttl rounded up
	// to whole seconds (0 when etcd did not run).
	EtcdTTLns     int64  `json:"etcd_ttl_ns,omitempty"`
	NodeTimeoutNs int64  `json:"node_timeout_ns"`
	HotDurationNs int64  `json:"hot_duration_ns"`
	OpTimeoutNs   int64  `json:"op_timeout_ns"`
	FaultBudgetNs int64  `json:"fault_budget_ns"`
	SlowLatencyNs int64  `json:"slow_latency_ns"`
	Seed          uint64 `json:"seed"` // of the multi scenarios' key picks
}

// scenarioJSON is one scenario's figures, one entry per contender. In a
// mixed scenario Workers is the hot waiters per instance, DistinctWorkers
// the distinct-key workers per instance, and Instances how many instances
// of each contender ran side by side. In a multi scenario each lease holds
// KeysPerLease keys picked out of KeyPool.
type scenarioJSON struct {
	Name            string           `json:"name"`
	Kind            string           `json:"kind"`
	Workers         int              `json:"workers"`
	DistinctWorkers int              `json:"distinct_workers,omitempty"`
	Instances       int              `json:"instances,omitempty"`
	KeysPerLease    int              `json:"keys_per_lease,omitempty"`
	KeyPool         int              `json:"key_pool,omitempty"`
	HoldNs          int64            `json:"hold_ns"`
	FaultNode       string           `json:"fault_node,omitempty"`
	EtcdFaultNode   string           `json:"etcd_fault_node,omitempty"`
	Contenders      []contenderJSON  `json:"contenders"`
	Skipped         []string         `json:"skipped,omitempty"`
	raw             []*scenarioCurve // for the plot
	rawDistinct     []*scenarioCurve // mixed: the distinct keys' pairs, for a second panel; rw: the writes' waits
	// The primitive scenarios (see primreport.go): Permits of a semaphore
	// scenario, ReadPercent of an rw one, and their contenders' figures
	// (Contenders is empty).
	Permits     int             `json:"permits,omitempty"`
	ReadPercent *int            `json:"read_percent,omitempty"`
	Semaphore   []semaphoreJSON `json:"semaphore,omitempty"`
	RW          []rwJSON        `json:"rw,omitempty"`
	Election    []electionJSON  `json:"election,omitempty"`
}

// contenderJSON is one contender's figures in one scenario. Ops and
// latencies count successful pairs (acquisitions in a hot scenario; in a
// multi one, acquisitions of every key of a lease, with their unlock);
// errors are counted apart. AllocsPerOp is the process-wide heap
// allocation count over the contender's measured runs divided by its
// attempted pairs. In a mixed scenario the top-level figures are those of
// the hot key in the mix (AllocsPerOp is not measured there: 0), and Mixed
// holds every phase.
type contenderJSON struct {
	Name               string                `json:"name"`
	ThroughputPerRound []float64             `json:"throughput_per_round"`
	MedianThroughput   float64               `json:"median_throughput"`
	Ops                int                   `json:"ops"`
	Errors             int                   `json:"errors"`
	FirstError         string                `json:"first_error,omitempty"`
	AllocsPerOp        float64               `json:"allocs_per_op"`
	Acquire            benchkit.LatencyStats `json:"acquire"`
	Pair               benchkit.LatencyStats `json:"pair"`
	MinShare           *float64              `json:"min_share,omitempty"`
	MinSharePerRound   []float64             `json:"min_share_per_round,omitempty"`
	PerWorker          [][]int               `json:"acquisitions_per_worker,omitempty"`
	VsRedsync          *float64              `json:"throughput_vs_redsync,omitempty"`
	VsQuorumlock       *float64              `json:"throughput_vs_quorumlock,omitempty"`
	Baseline           *contenderJSON        `json:"baseline,omitempty"`
	PairP50VsBaseline  *float64              `json:"pair_p50_vs_baseline,omitempty"`
	Mixed              *mixedJSON            `json:"mixed,omitempty"`
}

// scenarioCurve is the latencies one plot line is drawn from.
type scenarioCurve struct {
	name     string
	fault    []time.Duration // the scenario's latencies
	baseline []time.Duration // fault scenarios: without the fault; mixed: alone
	// baseLabel follows the contender's name in the baseline's legend
	// (default " (no fault)").
	baseLabel string
}

// summarizeRun computes every reported figure from the raw results.
func summarizeRun(res *results) runJSON {
	c := res.cfg
	out := runJSON{
		Nodes: res.nodes, EtcdMembers: res.etcdMembers, Provider: res.provider, RunID: res.runID, Notes: res.notes, cfg: c,
		Config: configJSON{
			Addrs: c.addrs, EtcdAddrs: c.etcdAddrs, Rounds: c.rounds, Ops: c.ops, TTLns: int64(c.ttl), NodeTimeoutNs: int64(c.timeout),
			HotDurationNs: int64(c.hotDuration), OpTimeoutNs: int64(c.opTimeout), FaultBudgetNs: int64(c.faultBudget),
			SlowLatencyNs: int64(c.slowLatency), Seed: c.seed,
		},
		Scenarios: []scenarioJSON{},
	}
	if len(c.addrs) == 0 {
		out.Config.Fsync = c.fsync
	}
	if res.etcdMembers > 0 {
		out.Config.EtcdTTLns = int64(etcdTTL(c.etcdTTL))
	}
	for _, r := range res.runs {
		out.Scenarios = append(out.Scenarios, scenarioFigures(r, res.faultNode))
	}
	return out
}

// scenarioFigures computes one scenario's figures; faultNode is the node
// the fault scenarios slow down or freeze.
func scenarioFigures(r *scenarioRun, faultNode string) scenarioJSON {
	sj := scenarioJSON{Name: r.sc.name, Kind: r.sc.kind.String(), Workers: r.sc.workers, HoldNs: int64(r.sc.hold), Skipped: r.skipped}
	if r.sc.fault() {
		sj.FaultNode, sj.EtcdFaultNode = faultNode, r.etcdFaultNode
	}
	if r.sc.primitive() {
		primitiveFigures(r, &sj)
		return sj
	}
	switch r.sc.kind {
	case kindMixed:
		sj.DistinctWorkers, sj.Instances = r.sc.distinct, mixedInstances
	case kindMulti:
		sj.KeysPerLease, sj.KeyPool = r.sc.keys, r.sc.pool
	}
	for i, t := range r.tallies {
		cj := contenderFigures(t, r.sc.contended())
		// The plot: a hot key's acquire wait, or the whole pair.
		curve := &scenarioCurve{name: t.name, fault: t.pair}
		if r.sc.kind == kindHot || r.sc.kind == kindMixed {
			curve.fault = t.acquire
		}
		if r.mixed != nil {
			mt := r.mixed[i]
			cj.Mixed = mixedFigures(mt)
			curve.baseline, curve.baseLabel = mt.hotAlone.acquire, " (alone)"
			sj.rawDistinct = append(sj.rawDistinct, &scenarioCurve{name: t.name, fault: mt.distinctMix.pair,
				baseline: mt.distinctAlone.pair, baseLabel: " (alone)"})
		}
		if r.baselines != nil {
			b := contenderFigures(r.baselines[i], false)
			cj.Baseline = &b
			if b.Pair.Count > 0 && cj.Pair.Count > 0 {
				cj.PairP50VsBaseline = ptr(benchkit.Ratio(float64(cj.Pair.P50ns), float64(b.Pair.P50ns)))
			}
			curve.baseline = r.baselines[i].pair
		}
		sj.Contenders = append(sj.Contenders, cj)
		sj.raw = append(sj.raw, curve)
	}
	for i := range sj.Contenders {
		for _, ref := range sj.Contenders {
			if ref.MedianThroughput <= 0 {
				continue
			}
			x := ptr(benchkit.Ratio(sj.Contenders[i].MedianThroughput, ref.MedianThroughput))
			switch ref.Name {
			case nameRedsync:
				sj.Contenders[i].VsRedsync = x
			case nameQuorum:
				sj.Contenders[i].VsQuorumlock = x
			}
		}
	}
	mixedVsRedsync(sj.Contenders)
	return sj
}

// contenderFigures summarises one tally.
func contenderFigures(t *tally, hot bool) contenderJSON {
	cj := contenderJSON{
		Name: t.name, ThroughputPerRound: t.throughput, MedianThroughput: benchkit.Median(t.throughput),
		Ops: t.ok, Errors: t.errors, Acquire: benchkit.Summarize(t.acquire), Pair: benchkit.Summarize(t.pair),
	}
	if cj.ThroughputPerRound == nil {
		cj.ThroughputPerRound = []float64{}
	}
	if t.firstErr != nil {
		cj.FirstError = t.firstErr.Error()
	}
	if n := t.ok + t.errors; n > 0 {
		cj.AllocsPerOp = float64(t.mallocs) / float64(n)
	}
	if hot {
		cj.MinShare = ptr(benchkit.Median(t.shares))
		cj.MinSharePerRound = t.shares
		cj.PerWorker = t.perWorker
	}
	return cj
}

// ptr returns a pointer to a copy of v (for the optional JSON fields).
func ptr[T any](v T) *T { return &v }

// writeJSON writes the run's figures to path.
func writeJSON(path string, s runJSON) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("-json: %w", err)
	}
	return nil
}

// report prints one markdown table per scenario.
func report(out io.Writer, s runJSON) {
	c := s.cfg
	fmt.Fprintf(out, "lockbench: %d nodes (%s), %d rounds, %d pairs per round (solo and fault scenarios), %v per round (hot and multi; per phase in mixed), ttl %v (the Redis contenders)\n",
		s.Nodes, s.Provider, c.rounds, c.ops, c.hotDuration, c.ttl)
	if s.EtcdMembers > 0 {
		fmt.Fprintf(out, "etcd: %d members (etcd fsyncs its WAL on every commit, whatever the Redis appendfsync), session TTL %v; its client and Locker per set of go-redis clients.\n",
			s.EtcdMembers, time.Duration(s.Config.EtcdTTLns))
	}
	fmt.Fprintln(out, "ops/s: median over rounds of successful pairs per second; latencies over every successful pair of every round;")
	fmt.Fprintln(out, "allocs/op: heap allocations of the whole process during the contender's runs (in fault scenarios, the bed's in-process proxy included) per attempted pair.")
	primitiveHeading(out, s)
	for _, sj := range s.Scenarios {
		fmt.Fprintf(out, "\n### %s: %s\n\n", sj.Name, describe(sj, c))
		rows, errs := table, firstErrors
		switch sj.Kind {
		case kindMixed.String():
			rows, errs = mixedTable, mixedFirstErrors
		case kindSemaphore.String(), kindRW.String(), kindElection.String():
			rows, errs = primitiveTable, func(io.Writer, scenarioJSON) {}
		}
		rows(out, sj)
		if len(sj.Skipped) > 0 {
			fmt.Fprintf(out, "\nnot run (cannot wait for a held key): %s\n", strings.Join(sj.Skipped, ", "))
		}
		errs(out, sj)
	}
	for _, n := range s.Notes {
		fmt.Fprintf(out, "\nnote: %s\n", n)
	}
}

// table prints the table of a solo, hot or fault scenario.
func table(out io.Writer, sj scenarioJSON) {
	switch sj.Kind {
	case kindHot.String():
		fmt.Fprintln(out, "| contender | acquisitions/s | wait p50 | wait p99 | wait p99.9 | pair p50 | pair p99 | pair p99.9 | min share | errors | allocs/op | vs redsync | vs quorumlock |")
		fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	case kindMulti.String():
		fmt.Fprintln(out, "| contender | pairs/s | wait p50 | wait p99 | wait p99.9 | pair p50 | pair p99 | pair p99.9 | min share | errors | allocs/op | vs redsync | vs quorumlock |")
		fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	case kindSolo.String():
		fmt.Fprintln(out, "| contender | ops/s | acquire p50 | acquire p99 | acquire p99.9 | pair p50 | pair p99 | pair p99.9 | errors | allocs/op | vs redsync | vs quorumlock |")
		fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	default:
		fmt.Fprintln(out, "| contender | ops/s | acquire p50 | acquire p99 | acquire p99.9 | pair p50 | pair p99 | pair p99.9 | errors | allocs/op | pair p50 without fault | with / without | vs redsync | vs quorumlock |")
		fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	}
	for _, cj := range sj.Contenders {
		cells := []string{cj.Name, fmt.Sprintf("%.0f", cj.MedianThroughput),
			benchkit.FormatLatency(cj.Acquire.P50ns, cj.Acquire.Count), benchkit.FormatLatency(cj.Acquire.P99ns, cj.Acquire.Count), benchkit.FormatLatency(cj.Acquire.P999ns, cj.Acquire.Count),
			benchkit.FormatLatency(cj.Pair.P50ns, cj.Pair.Count), benchkit.FormatLatency(cj.Pair.P99ns, cj.Pair.Count), benchkit.FormatLatency(cj.Pair.P999ns, cj.Pair.Count)}
		if cj.MinShare != nil {
			cells = append(cells, fmt.Sprintf("%.2f", *cj.MinShare))
		}
		cells = append(cells, fmt.Sprint(cj.Errors), fmt.Sprintf("%.0f", cj.AllocsPerOp))
		if cj.Baseline != nil {
			cells = append(cells, benchkit.FormatLatency(cj.Baseline.Pair.P50ns, cj.Baseline.Pair.Count), fmtRatio(cj.PairP50VsBaseline))
		}
		cells = append(cells, fmtRatio(cj.VsRedsync), fmtRatio(cj.VsQuorumlock))
		fmt.Fprintf(out, "| %s |\n", strings.Join(cells, " | "))
	}
}

// firstErrors prints the first error of each contender of a solo, hot or
// fault scenario that had one.
func firstErrors(out io.Writer, sj scenarioJSON) {
	for _, cj := range sj.Contenders {
		if cj.FirstError != "" {
			fmt.Fprintf(out, "\n%s: first error: %s\n", cj.Name, cj.FirstError)
		}
		if cj.Baseline != nil && cj.Baseline.FirstError != "" {
			fmt.Fprintf(out, "\n%s (without fault): first error: %s\n", cj.Name, cj.Baseline.FirstError)
		}
	}
}

// describe is the one-line subtitle of a scenario's table.
func describe(sj scenarioJSON, c config) string {
	switch sj.Kind {
	case kindSolo.String():
		return fmt.Sprintf("no contention, %d worker(s), distinct keys, %d pairs per round", sj.Workers, c.ops)
	case kindHot.String():
		return fmt.Sprintf("%d workers on one key, acquire (waiting) + hold %v + unlock, %v per round", sj.Workers, time.Duration(sj.HoldNs), c.hotDuration)
	case kindMixed.String():
		return describeMixed(sj, c)
	case kindSemaphore.String(), kindRW.String(), kindElection.String():
		return describePrimitive(sj, c)
	case kindMulti.String():
		return fmt.Sprintf("%d workers, each lease %d distinct keys picked at random (seed %d) out of %d, so key sets overlap; "+
			"acquire all (waiting) + unlock all, %v per round; quorumlock: one LockMulti lease (all or nothing per node), etcd: one LockMulti lease "+
			"(one recipe lock per key in sorted order), the others one lock per key in sorted order, released in reverse; "+
			"pairs/s: leases acquired and released per second, wait: acquiring every key, pair: wait + unlock",
			sj.Workers, sj.KeysPerLease, c.seed, sj.KeyPool, c.hotDuration)
	case kindSlowNode.String():
		return fmt.Sprintf("%s answers %v late (bed proxy), 1 worker, up to %d pairs or %v per round, through the proxies", faultNodes(sj), c.slowLatency, c.ops, c.faultBudget)
	default:
		return fmt.Sprintf("%s frozen (SIGSTOP), 1 worker, up to %d pairs or %v per round, each pair within %v, through the proxies", faultNodes(sj), c.ops, c.faultBudget, c.opTimeout)
	}
}

// faultNodes names the nodes a fault scenario hits: the Redis node, and
// the etcd member when etcd ran.
func faultNodes(sj scenarioJSON) string {
	if sj.EtcdFaultNode == "" {
		return sj.FaultNode
	}
	return fmt.Sprintf("%s (and etcd's %s, a follower)", sj.FaultNode, sj.EtcdFaultNode)
}

// fmtRatio prints a ratio as "1.07x", or "n/a" when there is none.
func fmtRatio(r *float64) string {
	if r == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.2fx", *r)
}
