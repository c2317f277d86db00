package main

import (
	"fmt"
	"image/color"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotutil"

	"github.com/quorumlock/quorumlock/internal/benchkit"
)

// writePlot draws latency CDFs into one PNG file at path, one panel per
// scenario (per client count for distinct, hot and cart) and one line per
// mode (lock/redlock, lock/etcd, db; dashed on the HA group):
// the 201s' latency of the closed loops, the buyers' answer latency of
// flash, and the closed-loop clients' 201 latency of mixed during the
// sale and, dashed, without it.
func writePlot(path string, res []*runResult) error {
	var names []string
	byName := map[string][]*runResult{}
	for _, r := range res {
		n := r.name()
		if byName[n] == nil {
			names = append(names, n)
		}
		byName[n] = append(byName[n], r)
	}
	if len(names) == 0 {
		return fmt.Errorf("-plot: no scenario ran")
	}
	var panels []*plot.Plot
	for _, n := range names {
		p, err := scenarioPanel(n, byName[n])
		if err != nil {
			return fmt.Errorf("-plot: %s: %w", n, err)
		}
		panels = append(panels, p)
	}
	if err := benchkit.WritePNG(path, panels, 2); err != nil {
		return fmt.Errorf("-plot: %w", err)
	}
	return nil
}

// scenarioPanel draws the panel of one scenario's runs.
func scenarioPanel(name string, runs []*runResult) (*plot.Plot, error) {
	xLabel, yLabel := "201 latency (ms)", "fraction of 201 answers"
	switch runs[0].scenario {
	case scenarioFlash:
		xLabel, yLabel = "buyer answer latency: first request to 201 or 409 (ms)", "fraction of answered buyers"
	case scenarioMixed, scenarioBusy:
		xLabel = "distinct clients' 201 latency (ms)"
	}
	p := benchkit.NewCDFPanel(name, xLabel, yLabel)
	for _, r := range runs {
		label := r.label() + onHA(r.postgres)
		col := modeColor(r.label())
		var err error
		switch r.scenario {
		case scenarioFlash:
			err = p.Add(r.sale.answerLatencies(), label, col, false)
		case scenarioBusy:
			err = p.Add(latencies(r.tallies), label+" beside the popular product", col, false)
			if err == nil {
				err = p.Add(latencies(r.alone.tallies), label+" alone", col, true)
			}
		case scenarioMixed:
			err = p.Add(latencies(r.tallies), label+" during the sale", col, false)
			if err == nil && r.alone != nil {
				err = p.Add(latencies(r.alone.tallies), label+" without the sale", col, true)
			}
		default:
			// On the HA group the line is dashed, in its mode's colour.
			err = p.Add(latencies(r.tallies), label, col, r.postgres == pgHA)
		}
		if err != nil {
			return nil, err
		}
	}
	return p.Plot(), nil
}

// modeColor gives each mode label its colour in every panel (lock/redlock
// and db those that lock and db had before the etcd backend).
func modeColor(label string) color.Color {
	labels := []string{modeLabel(modeLock, backendRedlock), modeDB, modeLabel(modeLock, backendEtcd)}
	i := max(slices.Index(labels, label), 0)
	return plotutil.DarkColors[i%len(plotutil.DarkColors)]
}

// latencies gathers the measured 201 latencies of tallies.
func latencies(tallies []*tally) []time.Duration {
	var out []time.Duration
	for _, t := range tallies {
		out = append(out, t.latencies...)
	}
	return out
}

// answerLatencies are the buyers' times from their first request to their
// final answer.
func (s *saleResult) answerLatencies() []time.Duration {
	var out []time.Duration
	for _, r := range s.buyers {
		if r.isFinal() {
			out = append(out, r.answered.Sub(r.first))
		}
	}
	return out
}
