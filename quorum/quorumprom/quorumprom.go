// Package quorumprom exports the events of a lease.Observer as Prometheus
// metrics, for either locker (quorum or etcdlock): it imports package lease,
// not the lockers, so an etcdlock user links no go-redis through it. It is
// the only place where the locks meet Prometheus: packages quorum and
// etcdlock depend on their client and the standard library alone.
//
//	obs, err := quorumprom.New(prometheus.DefaultRegisterer)
//	l, err := quorum.New(nodes, quorum.WithObserver(obs))
//	l, err := etcdlock.New(cli, etcdlock.WithObserver(obs))
//
// Metrics (namespace "quorumlock" unless WithNamespace says otherwise):
//
//	quorumlock_acquire_total{result}               acquisitions by result
//	quorumlock_acquire_duration_seconds{result}    time spent in Lock/TryLock/Do acquiring
//	quorumlock_acquire_attempts                    attempts per acquisition
//	quorumlock_node_errors_total{op,node}          failed node requests (node: address or index)
//	quorumlock_extend_total{result}                extensions: ok, lost, unconfirmed, canceled
//	quorumlock_extend_duration_seconds             time an extension took
//	quorumlock_release_nodes_total{result}         per node: released, not_owner, failed
//	quorumlock_lease_lost_total{reason}            leases lost: expired, extend_failed
//	quorumlock_lease_held_seconds                  how long lost leases had been held
//
// A rising not_owner count means holders release after their lease expired:
// the TTL is too short for the work, or processes pause.
package quorumprom

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quorumlock/quorumlock/internal/option"
	"github.com/quorumlock/quorumlock/lease"
)

// Option configures the metrics.
type Option func(*options) error

type options struct {
	namespace   string
	constLabels prometheus.Labels
	buckets     []float64
}

// WithNamespace sets the metric name prefix (default "quorumlock").
func WithNamespace(ns string) Option { return func(o *options) error { o.namespace = ns; return nil } }

// WithConstLabels adds labels with fixed values to every metric, for
// example to tell several Lockers apart.
func WithConstLabels(l prometheus.Labels) Option {
	return func(o *options) error { o.constLabels = l; return nil }
}

// WithBuckets sets the histogram buckets of the durations, in seconds.
// Default: 0.5ms to 5s, roughly doubling.
func WithBuckets(b []float64) Option { return func(o *options) error { o.buckets = b; return nil } }

var defaultBuckets = []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5}

// Results and reasons, in the order of their lease constants.
var (
	results = []lease.Result{lease.ResultAcquired, lease.ResultNotAcquired, lease.ResultUnavailable, lease.ResultCanceled, lease.ResultError}
	reasons = []lease.LostReason{lease.LostExpired, lease.LostExtendFailed}
)

// Observer is a lease.Observer, for a quorum or an etcdlock Locker, that
// updates Prometheus metrics. It is safe for concurrent use.
type Observer struct {
	acquireTotal      map[lease.Result]prometheus.Counter
	acquireDuration   map[lease.Result]prometheus.Observer
	attempts          prometheus.Histogram
	nodeErrors        *prometheus.CounterVec
	extendOK          prometheus.Counter
	extendLost        prometheus.Counter
	extendCanceled    prometheus.Counter
	extendUnconfirmed prometheus.Counter
	extendDuration    prometheus.Histogram
	released          prometheus.Counter
	notOwner          prometheus.Counter
	releaseFailed     prometheus.Counter
	lost              map[lease.LostReason]prometheus.Counter
	heldSeconds       prometheus.Histogram
}

var _ lease.Observer = (*Observer)(nil)

// errInvalid is what a refused option wraps.
var errInvalid = errors.New("quorumprom: invalid option")

// New creates the metrics and registers them on reg. It fails when reg
// rejects them (for example when they are already registered).
func New(reg prometheus.Registerer, opts ...Option) (*Observer, error) {
	if reg == nil {
		return nil, errors.New("quorumprom: nil Registerer")
	}
	o := options{namespace: "quorumlock", buckets: defaultBuckets}
	if err := option.Apply(&o, opts, errInvalid); err != nil {
		return nil, err
	}
	if len(o.buckets) == 0 {
		return nil, errors.New("quorumprom: no histogram buckets")
	}
	m := o.metrics()
	for _, c := range m.collectors() {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("quorumprom: register: %w", err)
		}
	}
	return m.observer(), nil
}

// metrics are the collectors, before their label values are resolved.
type metrics struct {
	acquireTotal    *prometheus.CounterVec
	acquireDuration *prometheus.HistogramVec
	attempts        prometheus.Histogram
	nodeErrors      *prometheus.CounterVec
	extendTotal     *prometheus.CounterVec
	extendDuration  prometheus.Histogram
	releaseNodes    *prometheus.CounterVec
	lost            *prometheus.CounterVec
	heldSeconds     prometheus.Histogram
}

// counter returns the options of a counter vector.
func (o *options) counter(name, help string) prometheus.CounterOpts {
	return prometheus.CounterOpts{Namespace: o.namespace, Name: name, Help: help, ConstLabels: o.constLabels}
}

// histogram returns the options of a histogram.
func (o *options) histogram(name, help string, buckets []float64) prometheus.HistogramOpts {
	return prometheus.HistogramOpts{Namespace: o.namespace, Name: name, Help: help, ConstLabels: o.constLabels, Buckets: buckets}
}

// metrics creates the collectors.
func (o *options) metrics() metrics {
	return metrics{
		acquireTotal:    prometheus.NewCounterVec(o.counter("acquire_total", "Acquisitions (Lock, TryLock, Do) by result."), []string{"result"}),
		acquireDuration: prometheus.NewHistogramVec(o.histogram("acquire_duration_seconds", "Time spent acquiring, retries included, by result.", o.buckets), []string{"result"}),
		attempts:        prometheus.NewHistogram(o.histogram("acquire_attempts", "Attempts per acquisition.", []float64{1, 2, 3, 5, 8, 13, 21, 34, 55, 89})),
		nodeErrors:      prometheus.NewCounterVec(o.counter("node_errors_total", "Failed node requests by operation and node."), []string{"op", "node"}),
		extendTotal:     prometheus.NewCounterVec(o.counter("extend_total", "Extensions by result: ok, lost (the lease is lost), unconfirmed (no majority answered; the lease is kept, possibly shortened), canceled."), []string{"result"}),
		extendDuration:  prometheus.NewHistogram(o.histogram("extend_duration_seconds", "Time an extension took.", o.buckets)),
		releaseNodes:    prometheus.NewCounterVec(o.counter("release_nodes_total", "Node answers to releases: released, not_owner (the key had expired or belonged to another owner), failed."), []string{"result"}),
		lost:            prometheus.NewCounterVec(o.counter("lease_lost_total", "Leases lost while held, by reason."), []string{"reason"}),
		heldSeconds:     prometheus.NewHistogram(o.histogram("lease_held_seconds", "How long lost leases had been held.", prometheus.ExponentialBuckets(0.01, 4, 10))),
	}
}

// collectors lists the collectors to register.
func (m metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.acquireTotal, m.acquireDuration, m.attempts, m.nodeErrors, m.extendTotal, m.extendDuration, m.releaseNodes, m.lost, m.heldSeconds}
}

// observer resolves every label value once, so that events never allocate
// and every series exists (at zero) from the start.
func (m metrics) observer() *Observer {
	obs := &Observer{
		acquireTotal:      map[lease.Result]prometheus.Counter{},
		acquireDuration:   map[lease.Result]prometheus.Observer{},
		attempts:          m.attempts,
		nodeErrors:        m.nodeErrors,
		extendOK:          m.extendTotal.WithLabelValues("ok"),
		extendLost:        m.extendTotal.WithLabelValues("lost"),
		extendCanceled:    m.extendTotal.WithLabelValues("canceled"),
		extendUnconfirmed: m.extendTotal.WithLabelValues("unconfirmed"),
		extendDuration:    m.extendDuration,
		released:          m.releaseNodes.WithLabelValues("released"),
		notOwner:          m.releaseNodes.WithLabelValues("not_owner"),
		releaseFailed:     m.releaseNodes.WithLabelValues("failed"),
		lost:              map[lease.LostReason]prometheus.Counter{},
		heldSeconds:       m.heldSeconds,
	}
	for _, r := range results {
		obs.acquireTotal[r] = m.acquireTotal.WithLabelValues(r.String())
		obs.acquireDuration[r] = m.acquireDuration.WithLabelValues(r.String())
	}
	for _, r := range reasons {
		obs.lost[r] = m.lost.WithLabelValues(r.String())
	}
	return obs
}

// ObserveAcquire counts the acquisition and records its duration and attempts.
func (o *Observer) ObserveAcquire(e lease.AcquireEvent) {
	if c, ok := o.acquireTotal[e.Result]; ok {
		c.Inc()
		o.acquireDuration[e.Result].Observe(e.Duration.Seconds())
	}
	o.attempts.Observe(float64(e.Attempts))
}

// ObserveNodeError counts a failed node request.
func (o *Observer) ObserveNodeError(e lease.NodeEvent) {
	node := e.Addr
	if node == "" {
		node = strconv.Itoa(e.Node)
	}
	o.nodeErrors.WithLabelValues(e.Op, node).Inc()
}

// ObserveExtend counts an extension by result and records its duration.
func (o *Observer) ObserveExtend(e lease.ExtendEvent) {
	switch {
	case e.Err == nil:
		o.extendOK.Inc()
	case errors.Is(e.Err, lease.ErrLeaseLost):
		o.extendLost.Inc()
	case errors.Is(e.Err, context.Canceled), errors.Is(e.Err, context.DeadlineExceeded):
		o.extendCanceled.Inc()
	default:
		o.extendUnconfirmed.Inc()
	}
	o.extendDuration.Observe(e.Duration.Seconds())
}

// ObserveRelease counts the node answers of a release.
func (o *Observer) ObserveRelease(e lease.ReleaseEvent) {
	o.released.Add(float64(e.Released))
	o.notOwner.Add(float64(e.NotOwner))
	o.releaseFailed.Add(float64(e.Failed))
}

// ObserveLost counts a lost lease and records how long it was held.
func (o *Observer) ObserveLost(e lease.LostEvent) {
	if c, ok := o.lost[e.Reason]; ok {
		c.Inc()
	}
	o.heldSeconds.Observe(e.Held.Seconds())
}
