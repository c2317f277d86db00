// Package metrics holds the order service's Prometheus series; every layer
// of the service records its own events in them.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the service's Prometheus counters. A nil *Metrics records
// nothing.
//
// The correctness signals (orders_place_total{outcome="stale_fence"},
// orders_lock_fallback_total) and the efficiency signals
// (orders_idempotency_claims_total{outcome="IN_PROGRESS"}, request
// durations) are separate series, so alerts can tell "slow" from "a
// defence fired".
type Metrics struct {
	claims    *prometheus.CounterVec
	places    *prometheus.CounterVec
	fallbacks *prometheus.CounterVec
	repairs   prometheus.Counter
	requests  *prometheus.HistogramVec
	batches   prometheus.Histogram
	queued    prometheus.Gauge
	waits     *prometheus.HistogramVec
}

// placeOutcomes are the labels of orders_place_total.
var placeOutcomes = []string{"created", "replayed", "in_progress", "out_of_stock", "fingerprint_mismatch", "unknown_product",
	"stale_fence", "lock_busy", "lock_unavailable", "shed", "cancelled", "invalid", "error"}

// New registers the service's metrics on reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orders_idempotency_claims_total",
			Help: "Idempotency claims by outcome (CREATED, IN_PROGRESS, SUCCESS, FINGERPRINT_MISMATCH, TAKEOVER, UNAVAILABLE).",
		}, []string{"outcome"}),
		places: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orders_place_total",
			Help: "POST /orders by the outcome that decided it, whichever layer did (Redis record or Postgres): created, replayed, in_progress, out_of_stock, fingerprint_mismatch, unknown_product, lock_busy, lock_unavailable, shed (the queue was full or the wait ran out), cancelled, invalid, error; and stale_fence for every order transaction a newer fence refused (its orders then retry under a new lease).",
		}, []string{"outcome"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orders_lock_fallback_total",
			Help: "Requests that could not take the stock lock, by fallback mode (db, reject).",
		}, []string{"mode"}),
		repairs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "orders_idempotency_repairs_total",
			Help: "Idempotency records repaired from Postgres after a takeover.",
		}),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "orders_http_request_duration_seconds",
			Help:    "HTTP request durations by route and status code.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}, []string{"route", "code"}),
		batches: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "orders_batch_size",
			Help:    "Orders placed per transaction (or answered per sold-out write) by the queue's batches.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 9),
		}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "orders_queued_requests",
			Help: "Requests waiting in this instance's queue, not yet taken into a batch.",
		}),
		waits: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "orders_queue_wait_seconds",
			Help:    "How long a request waited in this instance's queue before a batch took it, by the batch's kind: contended (its products had company; placed under the lock) or quiet.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"kind"}),
	}
	for _, c := range []prometheus.Collector{m.claims, m.places, m.fallbacks, m.repairs, m.requests, m.batches, m.queued, m.waits} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Every labelled series exists from the start at zero, so that the
	// alerts' increase() sees the first event after a restart too.
	for _, o := range []string{"CREATED", "IN_PROGRESS", "SUCCESS", "FINGERPRINT_MISMATCH", "TAKEOVER", "UNAVAILABLE"} {
		m.claims.WithLabelValues(o)
	}
	for _, o := range placeOutcomes {
		m.places.WithLabelValues(o)
	}
	for _, f := range []string{"db", "reject"} { // the lock fallbacks
		m.fallbacks.WithLabelValues(f)
	}
	return m, nil
}

// Claim counts an idempotency claim by its outcome.
func (m *Metrics) Claim(outcome string) {
	if m != nil {
		m.claims.WithLabelValues(outcome).Inc()
	}
}

// Place counts a placement by its result.
func (m *Metrics) Place(outcome string) {
	if m != nil {
		m.places.WithLabelValues(outcome).Inc()
	}
}

// Batch records the size of a batch.
func (m *Metrics) Batch(n int) {
	if m != nil {
		m.batches.Observe(float64(n))
	}
}

// Fallback counts n requests that could not take the stock lock.
func (m *Metrics) Fallback(mode string, n int) {
	if m != nil {
		m.fallbacks.WithLabelValues(mode).Add(float64(n))
	}
}

// Repair counts an idempotency record repaired from Postgres.
func (m *Metrics) Repair() {
	if m != nil {
		m.repairs.Inc()
	}
}

// Observe records a request's duration by route and status code.
func (m *Metrics) Observe(route string, code int, seconds float64) {
	if m != nil {
		m.requests.WithLabelValues(route, itoa(code)).Observe(seconds)
	}
}

func itoa(n int) string {
	if n >= 100 && n <= 599 {
		b := [3]byte{byte('0' + n/100), byte('0' + n/10%10), byte('0' + n%10)}
		return string(b[:])
	}
	return "other"
}

// Waiting moves orders_queued_requests by d.
func (m *Metrics) Waiting(d int) {
	if m != nil {
		m.queued.Add(float64(d))
	}
}

// Waited records how long a request waited for a batch of kind
// (contended or quiet).
func (m *Metrics) Waited(kind string, seconds float64) {
	if m != nil {
		m.waits.WithLabelValues(kind).Observe(seconds)
	}
}
