package main

import (
	"fmt"
	"image/color"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"

	"github.com/quorumlock/quorumlock/internal/benchkit"
)

// cdfPoints bounds the points of one CDF line.
const cdfPoints = benchkit.CDFPoints

// writePlot draws latency CDF panels, one line per contender (dashed: the
// same contender without the fault, or alone), on a log latency axis, into
// one PNG file at path. Each scenario has one panel, a mixed one two.
func writePlot(path string, s runJSON) error {
	if len(s.Scenarios) == 0 {
		return fmt.Errorf("-plot: no scenario ran")
	}
	var panels []*plot.Plot
	for _, sj := range s.Scenarios {
		ps, err := scenarioPanels(sj)
		if err != nil {
			return fmt.Errorf("-plot: %s: %w", sj.Name, err)
		}
		panels = append(panels, ps...)
	}
	if err := benchkit.WritePNG(path, panels, 2); err != nil {
		return fmt.Errorf("-plot: %w", err)
	}
	return nil
}

// scenarioPanels draws one scenario's panels: hot scenarios plot the
// acquire wait, the solo, multi and fault ones the whole lock+unlock pair
// (of every key of the lease, in multi), and a
// mixed one the hot key's wait and the distinct keys' pairs, each alone
// and in the mix.
func scenarioPanels(sj scenarioJSON) ([]*plot.Plot, error) {
	const pairLabel = "lock+unlock pair latency (ms)"
	switch sj.Kind {
	case kindHot.String():
		p, err := cdfPanel(sj.Name, "acquire wait (ms)", sj.raw)
		return []*plot.Plot{p}, err
	case kindMulti.String():
		p, err := cdfPanel(sj.Name, fmt.Sprintf("lock+unlock of all %d keys (ms)", sj.KeysPerLease), sj.raw)
		return []*plot.Plot{p}, err
	case kindSemaphore.String(), kindRW.String(), kindElection.String():
		return primitivePanels(sj)
	case kindMixed.String():
		hot, err := cdfPanel(sj.Name+": hot key", "hot key acquire wait (ms)", sj.raw)
		if err != nil {
			return nil, err
		}
		distinct, err := cdfPanel(sj.Name+": distinct keys", "distinct try+unlock pair latency (ms)", sj.rawDistinct)
		return []*plot.Plot{hot, distinct}, err
	}
	p, err := cdfPanel(sj.Name, pairLabel, sj.raw)
	return []*plot.Plot{p}, err
}

// cdfPanel draws one panel of CDFs, one line per curve and one more,
// dashed, for its baseline.
func cdfPanel(title, xLabel string, curves []*scenarioCurve) (*plot.Plot, error) {
	p := benchkit.NewCDFPanel(title, xLabel, "fraction of successful pairs")
	for i, c := range curves {
		baseLabel := c.baseLabel
		if baseLabel == "" {
			baseLabel = " (no fault)"
		}
		var col color.Color = plotutil.DarkColors[i%len(plotutil.DarkColors)]
		if c.name == nameFloor {
			col = color.Black
		}
		if err := p.Add(c.fault, c.name, col, false); err != nil {
			return nil, err
		}
		if err := p.Add(c.baseline, c.name+baseLabel, col, true); err != nil {
			return nil, err
		}
	}
	return p.Plot(), nil
}

// cdf returns at most cdfPoints points of the empirical CDF of ds, x in
// milliseconds (at least 1µs, for the log axis), always with the largest
// sample.
func cdf(ds []time.Duration) plotter.XYs { return benchkit.CDF(ds) }
