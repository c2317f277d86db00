package benchkit

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// CDFPoints bounds the points of one CDF line.
const CDFPoints = 400

// CDF returns at most CDFPoints points of the empirical CDF of ds, x in
// milliseconds (at least 1µs, for a log axis), always with the largest
// sample. ds is not modified.
func CDF(ds []time.Duration) plotter.XYs {
	s := slices.Clone(ds)
	slices.Sort(s)
	n := len(s)
	m := min(n, CDFPoints)
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

// CDFPanel is one panel of latency CDFs in the commands' style: latency in
// milliseconds on a log x axis, the fraction of samples on y, the legend
// at the bottom right.
type CDFPanel struct {
	p      *plot.Plot
	lo, hi float64 // the x range of the lines so far
}

// NewCDFPanel returns an empty panel.
func NewCDFPanel(title, xLabel, yLabel string) *CDFPanel {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top = false
	p.Legend.Left = false
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	return &CDFPanel{p: p, lo: math.Inf(1), hi: math.Inf(-1)}
}

// Add draws the CDF of ds as one line named label in colour c, dashed or
// solid. No samples, no line.
func (c *CDFPanel) Add(ds []time.Duration, label string, col color.Color, dashed bool) error {
	if len(ds) == 0 {
		return nil
	}
	xys := CDF(ds)
	l, err := plotter.NewLine(xys)
	if err != nil {
		return fmt.Errorf("cdf line %s: %w", label, err)
	}
	l.Color = col
	l.Width = vg.Points(1.5)
	if dashed {
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	}
	c.p.Add(l)
	c.p.Legend.Add(label, l)
	c.lo, c.hi = min(c.lo, xys[0].X), max(c.hi, xys[len(xys)-1].X)
	return nil
}

// Plot fits the x axis to the lines and returns the panel's plot.
func (c *CDFPanel) Plot() *plot.Plot {
	lo, hi := c.lo, c.hi
	if math.IsInf(lo, 0) { // no line: an empty panel
		lo, hi = 0.1, 1
	}
	// A log axis needs a positive range of some width.
	c.p.X.Min, c.p.X.Max = lo/1.2, max(hi*1.2, lo*2)
	return c.p
}

// WritePNG draws panels in a grid of cols columns, each panel 16 by 11
// cm at 96 dpi, into a PNG file at path.
func WritePNG(path string, panels []*plot.Plot, cols int) error {
	if len(panels) == 0 || cols < 1 {
		return fmt.Errorf("no panel to draw")
	}
	rows := (len(panels) + cols - 1) / cols
	grid := make([][]*plot.Plot, rows)
	for r := range grid {
		grid[r] = make([]*plot.Plot, cols)
	}
	for i, p := range panels {
		grid[i/cols][i%cols] = p
	}
	img := vgimg.NewWith(vgimg.UseWH(vg.Length(cols)*16*vg.Centimeter, vg.Length(rows)*11*vg.Centimeter), vgimg.UseDPI(96))
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
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
