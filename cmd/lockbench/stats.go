package main

import (
	"math"
	"slices"
	"time"
)

// latencyStats summarises one set of latencies. Percentiles are nearest
// rank: the smallest sample that at least that fraction of the samples do
// not exceed. Every figure is 0 when Count is 0.
type latencyStats struct {
	Count  int   `json:"count"`
	P50ns  int64 `json:"p50_ns"`
	P99ns  int64 `json:"p99_ns"`
	P999ns int64 `json:"p999_ns"`
	MaxNs  int64 `json:"max_ns"`
}

// summarize computes latencyStats over ds, sorting a copy once.
func summarize(ds []time.Duration) latencyStats {
	if len(ds) == 0 {
		return latencyStats{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return latencyStats{
		Count:  len(s),
		P50ns:  int64(sortedPercentile(s, 0.50)),
		P99ns:  int64(sortedPercentile(s, 0.99)),
		P999ns: int64(sortedPercentile(s, 0.999)),
		MaxNs:  int64(s[len(s)-1]),
	}
}

// percentile returns the nearest-rank p-th percentile (p in [0, 1]) of ds,
// or 0 for no samples. ds is not modified.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return sortedPercentile(s, p)
}

// sortedPercentile is percentile over an already sorted, non-empty s.
func sortedPercentile(s []time.Duration, p float64) time.Duration {
	// Nearest rank: the ceil(p*n)-th smallest sample, at least the first.
	// The epsilon keeps a p*n that is an integer in exact arithmetic
	// (0.999*1000) from rounding up to the next rank in floating point.
	rank := int(math.Ceil(p*float64(len(s)) - 1e-9))
	rank = min(max(rank, 1), len(s))
	return s[rank-1]
}

// median returns the median of xs (the mean of the two middle values for
// an even count), or 0 for none. xs is not modified.
func median(xs []float64) float64 {
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

// minShare is the fairness figure of a contended round: the smallest
// per-worker acquisition count divided by the mean count. 1 means every
// worker got the same share; 0 means some worker starved (or nobody got
// anything).
func minShare(counts []int) float64 {
	if len(counts) == 0 {
		return 0
	}
	total, least := 0, counts[0]
	for _, c := range counts {
		total += c
		least = min(least, c)
	}
	if total == 0 {
		return 0
	}
	return float64(least) * float64(len(counts)) / float64(total)
}

// ratio returns a/b, or 0 when b is not positive.
func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}
