package main

import (
	"math"
	"slices"
	"time"
)

// latencyStats summarises a set of latencies. Percentiles are nearest
// rank: the smallest sample that at least that fraction of the samples do
// not exceed. Every figure is 0 when Count is 0.
type latencyStats struct {
	Count  int   `json:"count"`
	P50ns  int64 `json:"p50_ns"`
	P99ns  int64 `json:"p99_ns"`
	P999ns int64 `json:"p999_ns"`
	MaxNs  int64 `json:"max_ns"`
}

// latencies sorts ds in place and summarises it.
func latencies(ds []time.Duration) latencyStats {
	if len(ds) == 0 {
		return latencyStats{}
	}
	slices.Sort(ds)
	return latencyStats{
		Count:  len(ds),
		P50ns:  int64(rank(ds, 0.50)),
		P99ns:  int64(rank(ds, 0.99)),
		P999ns: int64(rank(ds, 0.999)),
		MaxNs:  int64(ds[len(ds)-1]),
	}
}

// rank returns the nearest-rank p-quantile (p in [0, 1]) of the sorted,
// non-empty sorted.
func rank(sorted []time.Duration, p float64) time.Duration {
	// The epsilon keeps p*n that is an integer in exact arithmetic
	// (0.999*1000) from rounding up to the next rank.
	r := int(math.Ceil(p*float64(len(sorted)) - 1e-9))
	return sorted[min(max(r, 1), len(sorted))-1]
}
