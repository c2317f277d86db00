package main

import (
	"fmt"
	"io"
	"slices"

	"gonum.org/v1/plot"

	"github.com/quorumlock/quorumlock/internal/benchkit"
)

// semaphoreJSON is one contender's figures in a semaphore scenario.
// Acquisitions and the wait count successful acquire + hold + release
// cycles; MaxHolders is the most workers holding a permit at once over
// the rounds (above the scenario's permits: the contender over-admitted),
// OverPermits the acquisitions that found every permit held by others.
type semaphoreJSON struct {
	Name               string                `json:"name"`
	Unsafe             bool                  `json:"unsafe,omitempty"` // a known unsafe scheme, kept as a negative control
	PerSecondPerRound  []float64             `json:"per_second_per_round"`
	MedianPerSecond    float64               `json:"median_per_second"`
	Acquisitions       int                   `json:"acquisitions"`
	Errors             int                   `json:"errors"`
	FirstError         string                `json:"first_error,omitempty"`
	Wait               benchkit.LatencyStats `json:"wait"`
	MinShare           float64               `json:"min_share"` // median over rounds
	MinSharePerRound   []float64             `json:"min_share_per_round"`
	MaxHolders         int                   `json:"max_holders"`
	MaxHoldersPerRound []int                 `json:"max_holders_per_round"`
	OverPermits        int                   `json:"over_permits"`
}

// rwJSON is one contender's figures in an rw scenario: its reads and its
// writes (Acquire is the wait), the min share of each worker's operations
// (median over rounds), the overlaps (a writer beside anyone; counted in
// Errors too) and the most readers and writers seen holding at once.
type rwJSON struct {
	Name             string    `json:"name"`
	Reads            phaseJSON `json:"reads"`
	Writes           phaseJSON `json:"writes"`
	MinShare         float64   `json:"min_share"`
	MinSharePerRound []float64 `json:"min_share_per_round"`
	Overlaps         int       `json:"overlaps"`
	Errors           int       `json:"errors"`
	MaxReaders       int       `json:"max_readers"`
	MaxWriters       int       `json:"max_writers"`
}

// electionJSON is one contender's figures in the election scenario: the
// failover (from the leader's kill to the next leader's Campaign
// returning) and the term's increase of every round that measured one.
type electionJSON struct {
	Name         string                `json:"name"`
	Kill         string                `json:"kill"`
	Kills        int                   `json:"kills"`
	Failover     benchkit.LatencyStats `json:"failover"`
	FailoversNs  []int64               `json:"failovers_ns"`
	TermIncrease []int64               `json:"term_increase"`
	Errors       int                   `json:"errors"`
	FirstError   string                `json:"first_error,omitempty"`
}

// primitiveFigures fills in the figures of a primitive scenario, and the
// curves of its plot panels.
func primitiveFigures(r *scenarioRun, sj *scenarioJSON) {
	switch r.sc.kind {
	case kindSemaphore:
		sj.Permits = r.sc.permits
		for _, t := range r.sem {
			sj.Semaphore = append(sj.Semaphore, semaphoreFigures(t))
			sj.raw = append(sj.raw, &scenarioCurve{name: t.name, fault: t.acquire})
		}
	case kindRW:
		sj.ReadPercent = ptr(r.sc.readPct)
		for _, t := range r.rw {
			sj.RW = append(sj.RW, rwFigures(t))
			sj.raw = append(sj.raw, &scenarioCurve{name: t.name, fault: t.reads.acquire})
			sj.rawDistinct = append(sj.rawDistinct, &scenarioCurve{name: t.name, fault: t.writes.acquire})
		}
	case kindElection:
		for _, t := range r.elect {
			sj.Election = append(sj.Election, electionFigures(t))
			sj.raw = append(sj.raw, &scenarioCurve{name: t.name, fault: t.failovers})
		}
	}
}

// semaphoreFigures summarises one semaphore tally.
func semaphoreFigures(t *semTally) semaphoreJSON {
	cj := contenderFigures(t.tally, true)
	s := semaphoreJSON{Name: t.name, Unsafe: t.unsafe, PerSecondPerRound: cj.ThroughputPerRound, MedianPerSecond: cj.MedianThroughput,
		Acquisitions: cj.Ops, Errors: cj.Errors, FirstError: cj.FirstError, Wait: cj.Acquire,
		MinShare: benchkit.Median(t.shares), MinSharePerRound: nonNil(t.shares), MaxHoldersPerRound: nonNil(t.maxHolders), OverPermits: t.overPermits}
	if len(t.maxHolders) > 0 {
		s.MaxHolders = slices.Max(t.maxHolders)
	}
	return s
}

// rwFigures summarises one rw tally.
func rwFigures(t *rwTally) rwJSON {
	j := rwJSON{Name: t.name, Reads: phaseFigures(t.reads, false), Writes: phaseFigures(t.writes, false),
		MinShare: benchkit.Median(t.shares), MinSharePerRound: nonNil(t.shares), Overlaps: t.overlaps}
	j.Errors = j.Reads.Errors + j.Writes.Errors + t.overlaps
	if len(t.maxReaders) > 0 {
		j.MaxReaders, j.MaxWriters = slices.Max(t.maxReaders), slices.Max(t.maxWriters)
	}
	return j
}

// electionFigures summarises one election tally.
func electionFigures(t *electTally) electionJSON {
	j := electionJSON{Name: t.name, Kill: t.kill, Kills: len(t.failovers), Failover: benchkit.Summarize(t.failovers),
		FailoversNs: []int64{}, TermIncrease: nonNil(t.termUps), Errors: t.errors}
	for _, d := range t.failovers {
		j.FailoversNs = append(j.FailoversNs, int64(d))
	}
	if t.firstErr != nil {
		j.FirstError = t.firstErr.Error()
	}
	return j
}

// nonNil returns xs, or an empty slice for nil (JSON [] rather than null).
func nonNil[T any](xs []T) []T {
	if xs == nil {
		return []T{}
	}
	return xs
}

// describePrimitive is the subtitle of a primitive scenario's table.
func describePrimitive(sj scenarioJSON, c config) string {
	switch sj.Kind {
	case kindSemaphore.String():
		return describeSemaphore(sj, c)
	case kindRW.String():
		return describeRW(sj, c)
	}
	return describeElection(c)
}

// primitiveTable prints a primitive scenario's table, and its contenders'
// first errors.
func primitiveTable(out io.Writer, sj scenarioJSON) {
	switch sj.Kind {
	case kindSemaphore.String():
		semaphoreTable(out, sj)
	case kindRW.String():
		rwTable(out, sj)
	case kindElection.String():
		electionTable(out, sj)
	}
}

// semaphoreTable prints a semaphore scenario's table.
func semaphoreTable(out io.Writer, sj scenarioJSON) {
	fmt.Fprintln(out, "| contender | acquisitions/s | wait p50 | wait p99 | min share | errors | max holders | over P |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, s := range sj.Semaphore {
		name, most := s.Name, fmt.Sprint(s.MaxHolders)
		if s.Unsafe {
			name += " (UNSAFE scheme)"
		}
		if s.MaxHolders > sj.Permits {
			most = fmt.Sprintf("**%d > %d permits**", s.MaxHolders, sj.Permits)
		}
		fmt.Fprintf(out, "| %s | %.0f | %s | %s | %.2f | %d | %s | %d |\n", name, s.MedianPerSecond,
			benchkit.FormatLatency(s.Wait.P50ns, s.Wait.Count), benchkit.FormatLatency(s.Wait.P99ns, s.Wait.Count),
			s.MinShare, s.Errors, most, s.OverPermits)
	}
	for _, s := range sj.Semaphore {
		if s.MaxHolders > sj.Permits {
			fmt.Fprintf(out, "\n%s let %d workers hold at once, more than its %d permits (%d acquisitions found every permit taken).\n",
				s.Name, s.MaxHolders, sj.Permits, s.OverPermits)
		}
		if s.FirstError != "" {
			fmt.Fprintf(out, "\n%s: first error: %s\n", s.Name, s.FirstError)
		}
	}
}

// rwTable prints an rw scenario's table.
func rwTable(out io.Writer, sj scenarioJSON) {
	fmt.Fprintln(out, "| contender | reads/s | writes/s | read wait p50 / p99 | write wait p50 / p99 | min share | max readers | max writers | overlaps | errors |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, j := range sj.RW {
		fmt.Fprintf(out, "| %s | %.0f | %.0f | %s | %s | %.2f | %d | %d | %d | %d |\n", j.Name, j.Reads.MedianPerSecond, j.Writes.MedianPerSecond,
			p50p99(j.Reads.Acquire), p50p99(j.Writes.Acquire), j.MinShare, j.MaxReaders, j.MaxWriters, j.Overlaps, j.Errors)
	}
	for _, j := range sj.RW {
		for _, ph := range []struct {
			kind string
			p    phaseJSON
		}{{"read", j.Reads}, {"write", j.Writes}} {
			if ph.p.FirstError != "" {
				fmt.Fprintf(out, "\n%s (%s): first error: %s\n", j.Name, ph.kind, ph.p.FirstError)
			}
		}
	}
}

// electionTable prints the election scenario's table.
func electionTable(out io.Writer, sj scenarioJSON) {
	fmt.Fprintln(out, "| contender | kills measured | failover p50 | failover max | term increase | errors |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|")
	for _, j := range sj.Election {
		fmt.Fprintf(out, "| %s | %d | %s | %s | %s | %d |\n", j.Name, j.Kills,
			benchkit.FormatLatency(j.Failover.P50ns, j.Failover.Count), benchkit.FormatLatency(j.Failover.MaxNs, j.Failover.Count),
			termRange(j.TermIncrease), j.Errors)
	}
	fmt.Fprintln(out)
	for _, j := range sj.Election {
		fmt.Fprintf(out, "- %s kill: %s\n", j.Name, j.Kill)
	}
	for _, j := range sj.Election {
		if j.FirstError != "" {
			fmt.Fprintf(out, "\n%s: first error: %s\n", j.Name, j.FirstError)
		}
	}
}

// termRange prints the terms' increases as "n" or "min..max" ("n/a": none).
func termRange(ups []int64) string {
	if len(ups) == 0 {
		return "n/a"
	}
	lo, hi := slices.Min(ups), slices.Max(ups)
	if lo == hi {
		return fmt.Sprint(lo)
	}
	return fmt.Sprintf("%d..%d", lo, hi)
}

// primitivePanels draws a primitive scenario's panels: the semaphore's
// acquire wait, the read-write lock's read wait and write wait, the
// election's failover.
func primitivePanels(sj scenarioJSON) ([]*plot.Plot, error) {
	switch sj.Kind {
	case kindSemaphore.String():
		p, err := cdfPanel(sj.Name, fmt.Sprintf("permit acquire wait, %d permits (ms)", sj.Permits), sj.raw)
		return []*plot.Plot{p}, err
	case kindRW.String():
		reads, err := cdfPanel(sj.Name+": reads", "read acquire wait (ms)", sj.raw)
		if err != nil {
			return nil, err
		}
		writes, err := cdfPanel(sj.Name+": writes", "write acquire wait (ms)", sj.rawDistinct)
		return []*plot.Plot{reads, writes}, err
	}
	p, err := cdfPanel(sj.Name, "failover: kill to the next leader (ms)", sj.raw)
	return []*plot.Plot{p}, err
}

// primitiveHeading is the report's line on the primitive scenarios,
// printed when one ran.
func primitiveHeading(out io.Writer, s runJSON) {
	if slices.ContainsFunc(s.Scenarios, func(sj scenarioJSON) bool { return sj.Semaphore != nil || sj.RW != nil || sj.Election != nil }) {
		fmt.Fprintf(out, "semaphore and rw: %v per round, each hold %v, rates the median over rounds; quorumlock and etcd build them on their Lockers (lease.Primitives).\n",
			s.cfg.hotDuration, primitiveHold)
	}
}
