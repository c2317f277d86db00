package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// cdfPoints bounds the points of one CDF line.
const cdfPoints = 400

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
	const cols = 2
	rows := (len(panels) + cols - 1) / cols
	grid := make([][]*plot.Plot, rows)
	for r := range grid {
		grid[r] = make([]*plot.Plot, cols)
	}
	for i, p := range panels {
		grid[i/cols][i%cols] = p
	}
	img := vgimg.NewWith(vgimg.UseWH(cols*16*vg.Centimeter, vg.Length(rows)*11*vg.Centimeter), vgimg.UseDPI(96))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Centimeter, PadY: vg.Centimeter,
		PadTop: vg.Centimeter / 2, PadBottom: vg.Centimeter / 2, PadLeft: vg.Centimeter / 2, PadRight: vg.Centimeter / 2}
	canvases := plot.Align(grid, tiles, dc)
	for r := range grid {
		for c := range grid[r] {
			if grid[r][c] != nil {
				grid[r][c].Draw(canvases[r][c])
			}
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("-plot: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("-plot: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("-plot: %w", err)
	}
	return nil
}

// scenarioPanels draws one scenario's panels: hot scenarios plot the
// acquire wait, the solo and fault ones the whole lock+unlock pair, and a
// mixed one the hot key's wait and the distinct keys' pairs, each alone
// and in the mix.
func scenarioPanels(sj scenarioJSON) ([]*plot.Plot, error) {
	const pairLabel = "lock+unlock pair latency (ms)"
	switch sj.Kind {
	case kindHot.String():
		p, err := cdfPanel(sj.Name, "acquire wait (ms)", sj.raw)
		return []*plot.Plot{p}, err
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
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.Y.Label.Text = "fraction of successful pairs"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top = false
	p.Legend.Left = false
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, c := range curves {
		baseLabel := c.baseLabel
		if baseLabel == "" {
			baseLabel = " (no fault)"
		}
		for _, line := range []struct {
			ds     []time.Duration
			label  string
			dashed bool
		}{{c.fault, c.name, false}, {c.baseline, c.name + baseLabel, true}} {
			if len(line.ds) == 0 {
				continue
			}
			xys := cdf(line.ds)
			l, err := plotter.NewLine(xys)
			if err != nil {
				return nil, err
			}
			l.Color = plotutil.DarkColors[i%len(plotutil.DarkColors)]
			if c.name == nameFloor {
				l.Color = color.Black
			}
			l.Width = vg.Points(1.5)
			if line.dashed {
				l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			}
			p.Add(l)
			p.Legend.Add(line.label, l)
			lo, hi = min(lo, xys[0].X), max(hi, xys[len(xys)-1].X)
		}
	}
	if math.IsInf(lo, 0) { // nothing succeeded: an empty panel
		lo, hi = 0.1, 1
	}
	// A log axis needs a positive range of some width.
	p.X.Min, p.X.Max = lo/1.2, max(hi*1.2, lo*2)
	return p, nil
}

// cdf returns at most cdfPoints points of the empirical CDF of ds, x in
// milliseconds (at least 1µs, for the log axis), always with the largest
// sample.
func cdf(ds []time.Duration) plotter.XYs {
	s := slices.Clone(ds)
	slices.Sort(s)
	n := len(s)
	m := min(n, cdfPoints)
	xys := make(plotter.XYs, 0, m)
	for k := range m {
		i := k * (n - 1) / max(m-1, 1)
		if m == 1 {
			i = n - 1
		}
		x := max(float64(s[i])/float64(time.Millisecond), 0.001)
		xys = append(xys, plotter.XY{X: x, Y: float64(i+1) / float64(n)})
	}
	return xys
}
