package events

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Prometheus metrics of the relays and the consumers of a
// process. A nil *Metrics records nothing.
type Metrics struct {
	published prometheus.Counter
	relayErrs prometheus.Counter
	unsent    prometheus.Gauge
	lag       prometheus.Gauge
	consumed  *prometheus.CounterVec
	dedup     *prometheus.CounterVec
	dedupSize *prometheus.GaugeVec
	pending   *prometheus.GaugeVec
}

// NewMetrics registers the metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "events_published_total",
			Help: "Outbox rows the relay added to the stream (a row sent again after a crash counts again).",
		}),
		relayErrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "events_relay_errors_total",
			Help: "Relay rounds that failed (database or Redis); their rows stay unsent and are retried.",
		}),
		unsent: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "events_outbox_unsent",
			Help: "Outbox rows not yet published, at the last check.",
		}),
		lag: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "events_outbox_lag_seconds",
			Help: "Age of the oldest unsent outbox row at the last check (0 when none).",
		}),
		consumed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "events_consumed_total",
			Help: "Messages a consumer handled, by group and result (processed, duplicate, busy: another consumer holds the claim, failed: left pending for a retry, malformed: acknowledged and dropped, trimmed: pending when MAXLEN trimmed its entry, so lost to the group).",
		}, []string{"group", "result"}),
		dedup: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "events_dedup_total",
			Help: "Deduplication lookups by group, layer (redis, postgres, filter) and result (hit: a repeat, miss: first time). The hit rate is hit / (hit + miss) per layer.",
		}, []string{"group", "layer", "result"}),
		dedupSize: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "events_dedup_records",
			Help: "Size of the dedup set per group at the last check: consumed_events rows (exact mode) or the filter's estimated count (approximate mode).",
		}, []string{"group"}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "events_consumer_pending",
			Help: "Messages delivered to the group and not acknowledged (XPENDING), at the last check.",
		}, []string{"group"}),
	}
	for _, c := range []prometheus.Collector{m.published, m.relayErrs, m.unsent, m.lag, m.consumed, m.dedup, m.dedupSize, m.pending} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) publish(n int) {
	if m != nil {
		m.published.Add(float64(n))
	}
}

func (m *Metrics) relayError() {
	if m != nil {
		m.relayErrs.Inc()
	}
}

func (m *Metrics) outbox(unsent int64, lag time.Duration) {
	if m != nil {
		m.unsent.Set(float64(unsent))
		m.lag.Set(lag.Seconds())
	}
}

// group creates the group's series at zero, so that rates exist from the
// start.
func (m *Metrics) group(g string, layers ...string) {
	if m == nil {
		return
	}
	for _, r := range []string{"processed", "duplicate", "busy", "failed", "malformed", "trimmed"} {
		m.consumed.WithLabelValues(g, r)
	}
	for _, l := range layers {
		m.dedup.WithLabelValues(g, l, "hit")
		m.dedup.WithLabelValues(g, l, "miss")
	}
	m.dedupSize.WithLabelValues(g)
	m.pending.WithLabelValues(g)
}

func (m *Metrics) consume(g, result string) {
	if m != nil {
		m.consumed.WithLabelValues(g, result).Inc()
	}
}

func (m *Metrics) lookup(g, layer string, hit bool) {
	if m == nil {
		return
	}
	r := "miss"
	if hit {
		r = "hit"
	}
	m.dedup.WithLabelValues(g, layer, r).Inc()
}

func (m *Metrics) stats(g string, size, pending int64) {
	if m != nil {
		if size >= 0 {
			m.dedupSize.WithLabelValues(g).Set(float64(size))
		}
		m.pending.WithLabelValues(g).Set(float64(pending))
	}
}
