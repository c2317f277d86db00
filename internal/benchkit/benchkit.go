// Package benchkit holds what the benchmark commands (devtools/cmd/lockbench and
// devtools/cmd/orderbench) share: latency summaries with nearest-rank percentiles,
// medians and ratios, latency formatting for tables, latency CDF panels
// drawn with gonum/plot into one PNG file, and the progress bar.
// It is for commands only: no library package imports it.
package benchkit

import (
	"math"
	"os"
	"slices"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// LatencyStats summarises one set of latencies. Percentiles are nearest
// rank: the smallest sample that at least that fraction of the samples do
// not exceed. Every figure is 0 when Count is 0.
type LatencyStats struct {
	Count  int   `json:"count"`
	P50ns  int64 `json:"p50_ns"`
	P99ns  int64 `json:"p99_ns"`
	P999ns int64 `json:"p999_ns"`
	MaxNs  int64 `json:"max_ns"`
}

// Summarize computes LatencyStats over ds, sorting a copy once; ds is not
// modified.
func Summarize(ds []time.Duration) LatencyStats {
	if len(ds) == 0 {
		return LatencyStats{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return LatencyStats{
		Count:  len(s),
		P50ns:  int64(SortedPercentile(s, 0.50)),
		P99ns:  int64(SortedPercentile(s, 0.99)),
		P999ns: int64(SortedPercentile(s, 0.999)),
		MaxNs:  int64(s[len(s)-1]),
	}
}

// Percentile returns the nearest-rank p-th percentile (p in [0, 1]) of ds,
// or 0 for no samples. ds is not modified.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return SortedPercentile(s, p)
}

// SortedPercentile is Percentile over an already sorted, non-empty s.
func SortedPercentile(s []time.Duration, p float64) time.Duration {
	// Nearest rank: the ceil(p*n)-th smallest sample, at least the first.
	// The epsilon keeps a p*n that is an integer in exact arithmetic
	// (0.999*1000) from rounding up to the next rank in floating point.
	rank := int(math.Ceil(p*float64(len(s)) - 1e-9))
	rank = min(max(rank, 1), len(s))
	return s[rank-1]
}

// Median returns the median of xs (the mean of the two middle values for
// an even count), or 0 for none. xs is not modified.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Ratio returns a/b, or 0 when b is not positive.
func Ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// FormatLatency prints a latency in ns to a useful precision, or "-" when
// there were no samples.
func FormatLatency(ns int64, count int) string {
	if count == 0 {
		return "-"
	}
	d := time.Duration(ns)
	switch {
	case d >= 100*time.Millisecond:
		d = d.Round(time.Millisecond)
	case d >= time.Millisecond:
		d = d.Round(10 * time.Microsecond)
	default:
		d = d.Round(time.Microsecond)
	}
	return d.String()
}

// Progress is a progress bar on stderr. It does nothing when quiet or when
// stderr is not a terminal.
type Progress struct {
	bar *progressbar.ProgressBar
}

// NewProgress returns a bar named name of total steps.
func NewProgress(name string, total int, quiet bool) *Progress {
	if quiet || total == 0 || !term.IsTerminal(int(os.Stderr.Fd())) {
		return &Progress{}
	}
	return &Progress{bar: progressbar.NewOptions(total,
		progressbar.OptionSetWriter(os.Stderr),
		progressbar.OptionSetDescription(name),
		progressbar.OptionShowCount(),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)}
}

// Start names the step under way.
func (p *Progress) Start(desc string) {
	if p.bar != nil {
		p.bar.Describe(desc)
	}
}

// Done counts one step.
func (p *Progress) Done() {
	if p.bar != nil {
		_ = p.bar.Add(1)
	}
}

// Finish clears the bar.
func (p *Progress) Finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}
