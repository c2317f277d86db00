package main

import (
	"fmt"
	"io"
	"time"

	"github.com/quorumlock/quorumlock/internal/benchkit"
)

// busyJSON is busy's two sides, each together and alone. The ratios are
// together over alone: orders/s (above 0.8 the side kept its pace) and
// p99 (below 1.5 its latency held).
type busyJSON struct {
	Distinct busySideJSON `json:"distinct"`
	Popular  busySideJSON `json:"popular"`
}

// busySideJSON is one side of a busy run.
type busySideJSON struct {
	Together  phaseJSON `json:"together"`
	Alone     phaseJSON `json:"alone"`
	RateRatio *float64  `json:"rate_ratio,omitempty"`
	P99Ratio  *float64  `json:"p99_ratio,omitempty"`
}

// busyFigures is busy's figures from its four phases.
func busyFigures(distinct, distinctAlone, popular, popularAlone phaseJSON) *busyJSON {
	side := func(together, alone phaseJSON) busySideJSON {
		s := busySideJSON{Together: together, Alone: alone}
		if alone.CreatedPerSec > 0 {
			s.RateRatio = new(together.CreatedPerSec / alone.CreatedPerSec)
		}
		s.P99Ratio = ratioOf(together.Latency201.P99ns, alone.Latency201.P99ns)
		return s
	}
	return &busyJSON{Distinct: side(distinct, distinctAlone), Popular: side(popular, popularAlone)}
}

// reportBusy prints the busy runs: each side's orders/s and p99 together
// and alone.
func reportBusy(out io.Writer, s summaryJSON) {
	var rows []runJSON
	for _, r := range s.Runs {
		if r.Busy != nil {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "Busy: %d closed-loop clients order distinct products while %d buy one popular product (its stock lasts the run), together,\n",
		s.Config.Clients, s.Config.BusyBuyers)
	fmt.Fprintf(out, "then each side alone; each phase %v after a %v warm-up; orders/s and p99 over each window's 201s; together/alone ratios.\n",
		time.Duration(s.Config.DurationNs), time.Duration(s.Config.WarmupNs))
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| mode | side | orders/s alone | orders/s together | ratio | p99 alone | p99 together | ratio | other answers together | check |")
	fmt.Fprintln(out, "|---|---|---:|---:|---:|---:|---:|---:|---|---|")
	for _, r := range rows {
		for _, side := range []struct {
			name string
			s    busySideJSON
		}{{"distinct", r.Busy.Distinct}, {"popular", r.Busy.Popular}} {
			t, a := side.s.Together, side.s.Alone
			fmt.Fprintf(out, "| %s | %s | %.0f | %.0f | %s | %s | %s | %s | %s | %s |\n", runLabel(r), side.name,
				a.CreatedPerSec, t.CreatedPerSec, fmtRatio(side.s.RateRatio),
				benchkit.FormatLatency(a.Latency201.P99ns, a.Latency201.Count), benchkit.FormatLatency(t.Latency201.P99ns, t.Latency201.Count),
				fmtRatio(side.s.P99Ratio), fmtOther(t.Other), fmtCheck(r.Check))
		}
	}
}
