package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/internal/benchkit"
)

// mixedJSON is one contender's figures in a mixed scenario (the
// contender's "mixed" object). The four phases are the hot key alone, the
// distinct keys alone, and each of them while the other runs beside it
// (mixed). The ratios mixed/alone are per round, over the rounds whose
// alone rate was above 0, and summarised by their median (not by the
// ratio of the median rates).
type mixedJSON struct {
	HotAlone      phaseJSON `json:"hot_alone"`
	HotMixed      phaseJSON `json:"hot_mixed"`
	DistinctAlone phaseJSON `json:"distinct_alone"`
	DistinctMixed phaseJSON `json:"distinct_mixed"`

	HotMixedVsAlonePerRound      []float64 `json:"hot_mixed_vs_alone_per_round"`
	HotMixedVsAlone              *float64  `json:"hot_mixed_vs_alone,omitempty"`
	DistinctMixedVsAlonePerRound []float64 `json:"distinct_mixed_vs_alone_per_round"`
	DistinctMixedVsAlone         *float64  `json:"distinct_mixed_vs_alone,omitempty"`

	Errors                 int      `json:"errors"` // over the four phases
	HotMixedVsRedsync      *float64 `json:"hot_mixed_vs_redsync,omitempty"`
	DistinctMixedVsRedsync *float64 `json:"distinct_mixed_vs_redsync,omitempty"`
}

// phaseJSON is one kind of traffic of a mixed scenario, alone or mixed.
// Ops counts successes: acquisitions of the hot key (hand-overs), or
// distinct try+unlock pairs; PerSecond is that per second. For the hot key
// Acquire is the wait; for the distinct keys it is one try.
type phaseJSON struct {
	PerSecondPerRound []float64             `json:"per_second_per_round"`
	MedianPerSecond   float64               `json:"median_per_second"`
	Ops               int                   `json:"ops"`
	Errors            int                   `json:"errors"`
	FirstError        string                `json:"first_error,omitempty"`
	Acquire           benchkit.LatencyStats `json:"acquire"`
	Pair              benchkit.LatencyStats `json:"pair"`
	MinShare          *float64              `json:"min_share,omitempty"` // hot key: median over rounds
}

// phaseFigures summarises one phase's tally.
func phaseFigures(t *tally, hot bool) phaseJSON {
	cj := contenderFigures(t, hot)
	return phaseJSON{
		PerSecondPerRound: cj.ThroughputPerRound, MedianPerSecond: cj.MedianThroughput,
		Ops: cj.Ops, Errors: cj.Errors, FirstError: cj.FirstError,
		Acquire: cj.Acquire, Pair: cj.Pair, MinShare: cj.MinShare,
	}
}

// mixedFigures summarises one contender's mixed tally.
func mixedFigures(t *mixedTally) *mixedJSON {
	m := &mixedJSON{
		HotAlone: phaseFigures(t.hotAlone, true), HotMixed: phaseFigures(t.hotMix, true),
		DistinctAlone: phaseFigures(t.distinctAlone, false), DistinctMixed: phaseFigures(t.distinctMix, false),
		HotMixedVsAlonePerRound: t.hotRatio, DistinctMixedVsAlonePerRound: t.distinctRatio,
	}
	m.Errors = m.HotAlone.Errors + m.HotMixed.Errors + m.DistinctAlone.Errors + m.DistinctMixed.Errors
	if len(t.hotRatio) > 0 {
		m.HotMixedVsAlone = ptr(benchkit.Median(t.hotRatio))
	} else {
		m.HotMixedVsAlonePerRound = []float64{}
	}
	if len(t.distinctRatio) > 0 {
		m.DistinctMixedVsAlone = ptr(benchkit.Median(t.distinctRatio))
	} else {
		m.DistinctMixedVsAlonePerRound = []float64{}
	}
	return m
}

// mixedVsRedsync sets each contender's mixed rates relative to redsync's,
// when redsync ran and had a rate above 0.
func mixedVsRedsync(cs []contenderJSON) {
	var ref *mixedJSON
	for _, c := range cs {
		if c.Name == nameRedsync {
			ref = c.Mixed
		}
	}
	if ref == nil {
		return
	}
	for _, c := range cs {
		if c.Mixed == nil {
			continue
		}
		if r := ref.HotMixed.MedianPerSecond; r > 0 {
			c.Mixed.HotMixedVsRedsync = ptr(c.Mixed.HotMixed.MedianPerSecond / r)
		}
		if r := ref.DistinctMixed.MedianPerSecond; r > 0 {
			c.Mixed.DistinctMixedVsRedsync = ptr(c.Mixed.DistinctMixed.MedianPerSecond / r)
		}
	}
}

// mixedTable prints a mixed scenario's table.
func mixedTable(out io.Writer, sj scenarioJSON) {
	fmt.Fprintln(out, "| contender | hot/s alone | hot/s mixed | hot mixed/alone | distinct/s alone | distinct/s mixed | distinct mixed/alone |"+
		" hot wait p50 / p99 alone | hot wait p50 / p99 mixed | distinct pair p50 / p99 alone | distinct pair p50 / p99 mixed | errors | hot mixed vs redsync | distinct mixed vs redsync |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, cj := range sj.Contenders {
		m := cj.Mixed
		if m == nil {
			continue
		}
		cells := []string{cj.Name,
			fmt.Sprintf("%.0f", m.HotAlone.MedianPerSecond), fmt.Sprintf("%.0f", m.HotMixed.MedianPerSecond), fmtRatio(m.HotMixedVsAlone),
			fmt.Sprintf("%.0f", m.DistinctAlone.MedianPerSecond), fmt.Sprintf("%.0f", m.DistinctMixed.MedianPerSecond), fmtRatio(m.DistinctMixedVsAlone),
			p50p99(m.HotAlone.Acquire), p50p99(m.HotMixed.Acquire), p50p99(m.DistinctAlone.Pair), p50p99(m.DistinctMixed.Pair),
			fmt.Sprint(m.Errors), fmtRatio(m.HotMixedVsRedsync), fmtRatio(m.DistinctMixedVsRedsync)}
		fmt.Fprintf(out, "| %s |\n", strings.Join(cells, " | "))
	}
}

// mixedFirstErrors prints the first error of each phase of each contender
// of a mixed scenario that had one.
func mixedFirstErrors(out io.Writer, sj scenarioJSON) {
	for _, cj := range sj.Contenders {
		if cj.Mixed == nil {
			continue
		}
		for _, ph := range []struct {
			name string
			p    phaseJSON
		}{{"hot alone", cj.Mixed.HotAlone}, {"distinct alone", cj.Mixed.DistinctAlone}, {"hot mixed", cj.Mixed.HotMixed}, {"distinct mixed", cj.Mixed.DistinctMixed}} {
			if ph.p.FirstError != "" {
				fmt.Fprintf(out, "\n%s (%s): first error: %s\n", cj.Name, ph.name, ph.p.FirstError)
			}
		}
	}
}

// p50p99 prints a latency summary's median and 99th percentile as one cell.
func p50p99(s benchkit.LatencyStats) string {
	return benchkit.FormatLatency(s.P50ns, s.Count) + " / " + benchkit.FormatLatency(s.P99ns, s.Count)
}

// describeMixed is the one-line subtitle of a mixed scenario's table.
func describeMixed(sj scenarioJSON, c config) string {
	return fmt.Sprintf("%d instances (each its own clients and locker), each with %d waiters on one hot key (acquire + hold %v + unlock) "+
		"and %d workers on distinct keys (try + unlock); per round %v of the hot key alone, %v of the distinct keys alone, %v of both; "+
		"rates are medians over rounds, mixed/alone the median of the per-round ratios",
		sj.Instances, sj.Workers, time.Duration(sj.HoldNs), sj.DistinctWorkers, c.hotDuration, c.hotDuration, c.hotDuration)
}
