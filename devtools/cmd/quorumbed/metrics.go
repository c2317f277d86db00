package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// metricSeries is one series of a scrape.
type metricSeries struct {
	labels map[string]string
	value  float64
}

// metricSet is one scrape, by metric name. A histogram or a summary NAME
// is kept as its NAME_count and NAME_sum series.
type metricSet map[string][]metricSeries

// sum returns the sum of the series of name whose labels include match,
// and whether there was any.
func (m metricSet) sum(name string, match map[string]string) (float64, bool) {
	total, found := 0.0, false
	for _, s := range m[name] {
		if matches(s.labels, match) {
			total += s.value
			found = true
		}
	}
	return total, found
}

// labelValues returns the values label takes in the series of name.
func (m metricSet) labelValues(name, label string) []string {
	var out []string
	for _, s := range m[name] {
		if v, ok := s.labels[label]; ok && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

func matches(labels, match map[string]string) bool {
	for k, v := range match {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// scrapeMetrics fetches url and parses it as the Prometheus text format.
func scrapeMetrics(ctx context.Context, url string) (metricSet, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("scrape: %w", err)
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	return parseMetrics(resp.Body)
}

// parseMetrics reads the Prometheus text exposition format.
func parseMetrics(r io.Reader) (metricSet, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	set := metricSet{}
	for name, mf := range families {
		for _, m := range mf.GetMetric() {
			labels := make(map[string]string, len(m.GetLabel()))
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			add := func(name string, v float64) {
				set[name] = append(set[name], metricSeries{labels: labels, value: v})
			}
			switch {
			case m.GetCounter() != nil:
				add(name, m.GetCounter().GetValue())
			case m.GetGauge() != nil:
				add(name, m.GetGauge().GetValue())
			case m.GetUntyped() != nil:
				add(name, m.GetUntyped().GetValue())
			case m.GetHistogram() != nil:
				add(name+"_count", float64(m.GetHistogram().GetSampleCount()))
				add(name+"_sum", m.GetHistogram().GetSampleSum())
			case m.GetSummary() != nil:
				add(name+"_count", float64(m.GetSummary().GetSampleCount()))
				add(name+"_sum", m.GetSummary().GetSampleSum())
			}
		}
	}
	return set, nil
}
