package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// The replication watch's period and the bound on each of its rounds
// (each of its two reads: the primary's, the monitor's).
const (
	replicationEvery   = 5 * time.Second
	replicationTimeout = 2 * time.Second
)

// varPGHAMonitorURL names the optional URL of the pg_auto_failover monitor
// (a secret: it may hold a password).
const varPGHAMonitorURL = "ORDERS_PGHA_MONITOR_URL"

// standbyStates are the walsender states of pg_stat_replication, and
// unknown: a row whose state the role may not read (it lacks
// pg_read_all_stats, which pg_monitor grants).
var standbyStates = []string{"startup", "catchup", "streaming", "backup", "stopping", "unknown"}

// noStats is the warning, logged once, that the role cannot read
// pg_stat_replication's columns.
const noStats = "postgres replication: the database role may not read pg_stat_replication's columns " +
	"(grant it pg_monitor): orders_postgres_sync_standbys and the lag gauges stay NaN"

// replicationSQL: whether the server is a standby, whether the role can
// read the walsenders' columns (pg_read_all_stats, in pg_monitor;
// superusers can), and the physical replication slots, active and not.
// A slot stays while its standby is away, so a primary with slots expects
// standbys.
const replicationSQL = `SELECT pg_is_in_recovery(), pg_has_role(current_user, 'pg_read_all_stats', 'USAGE'),
	(SELECT count(*) FROM pg_replication_slots WHERE slot_type = 'physical' AND active),
	(SELECT count(*) FROM pg_replication_slots WHERE slot_type = 'physical' AND NOT active)`

// standbysSQL lists the primary's walsenders to physical standbys (those
// of logical slots are left out) with how far each one's replay is
// behind, in bytes of WAL and in time. Without pg_read_all_stats every
// column but pid is NULL.
const standbysSQL = `SELECT state, sync_state,
	pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::float8,
	extract(epoch FROM replay_lag)::float8
FROM pg_stat_replication
WHERE pid NOT IN (SELECT active_pid FROM pg_replication_slots WHERE slot_type = 'logical' AND active_pid IS NOT NULL)`

// monitorSQL lists the data nodes the pg_auto_failover monitor knows, in
// every formation, with the state each one's keeper last reported and the
// monitor's health check (1: good, 0: bad, -1: not yet checked).
const monitorSQL = `SELECT formationid, nodename, reportedstate::text, health
FROM pgautofailover.node ORDER BY formationid, nodeid`

// walSender is one row of standbysSQL; a nil field was NULL.
type walSender struct {
	state, syncState     *string
	lagBytes, lagSeconds *float64
}

// replicationReport is what one round read from the primary.
type replicationReport struct {
	readable                   bool           // the role may read pg_stat_replication's columns
	hidden                     bool           // there are walsenders whose columns the role may not read
	standbys                   map[string]int // walsenders by state ("unknown" when unreadable)
	sync                       int            // sync_state sync or quorum
	lagBytes, lagSeconds       float64        // the largest replay lag (0 without standbys)
	slotsActive, slotsInactive int            // physical replication slots
}

// summarize counts the walsenders by state and the synchronous ones, and
// takes the largest replay lag. A walsender whose replay_lag is NULL (it
// has caught up and nothing was written since) lags 0 s.
func summarize(readable bool, senders []walSender) replicationReport {
	r := replicationReport{readable: readable, hidden: !readable && len(senders) > 0, standbys: map[string]int{}}
	for _, s := range senders {
		state := "unknown"
		if s.state != nil {
			state = *s.state
		}
		r.standbys[state]++
		if s.syncState != nil && (*s.syncState == "sync" || *s.syncState == "quorum") {
			r.sync++
		}
		if s.lagBytes != nil {
			r.lagBytes = max(r.lagBytes, *s.lagBytes)
		}
		if s.lagSeconds != nil {
			r.lagSeconds = max(r.lagSeconds, *s.lagSeconds)
		}
	}
	return r
}

// readReplication reads the replication state of the server the pool
// reaches, on one connection. A standby reached is errReadOnly.
func readReplication(ctx context.Context, pool *pgxpool.Pool) (replicationReport, error) {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return replicationReport{}, err
	}
	defer c.Release()
	var standby, readable bool
	var active, inactive int
	if err := c.QueryRow(ctx, replicationSQL).Scan(&standby, &readable, &active, &inactive); err != nil {
		return replicationReport{}, err
	}
	if standby {
		return replicationReport{}, errReadOnly
	}
	rows, err := c.Query(ctx, standbysSQL)
	if err != nil {
		return replicationReport{}, err
	}
	senders, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (walSender, error) {
		var s walSender
		return s, r.Scan(&s.state, &s.syncState, &s.lagBytes, &s.lagSeconds)
	})
	if err != nil {
		return replicationReport{}, err
	}
	rep := summarize(readable, senders)
	rep.slotsActive, rep.slotsInactive = active, inactive
	return rep, nil
}

// pghaNode is one data node as the monitor reports it.
type pghaNode struct {
	formation, name, state string
	health                 int
}

// readMonitor reads the data nodes from the monitor.
func readMonitor(ctx context.Context, pool *pgxpool.Pool) ([]pghaNode, error) {
	rows, err := pool.Query(ctx, monitorSQL)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (pghaNode, error) {
		var n pghaNode
		return n, r.Scan(&n.formation, &n.name, &n.state, &n.health)
	})
}

// replicationMetrics are the gauges of the primary's replication.
type replicationMetrics struct {
	standbys   *prometheus.GaugeVec
	sync       prometheus.Gauge
	lagBytes   prometheus.Gauge
	lagSeconds prometheus.Gauge
	slots      *prometheus.GaugeVec
	readable   prometheus.Gauge
	up         prometheus.Gauge
}

// newReplicationMetrics registers the gauges on reg. Until a round has
// read them, the values are NaN and the probe 0.
func newReplicationMetrics(reg prometheus.Registerer) (*replicationMetrics, error) {
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	m := &replicationMetrics{
		standbys: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "orders_postgres_standbys",
			Help: "Standbys streaming from the Postgres primary (pg_stat_replication), by walsender state; unknown: the role may not read it (grant pg_monitor). NaN: the last round failed."}, []string{"state"}),
		sync: gauge("orders_postgres_sync_standbys",
			"Standbys whose commits the primary waits for (sync_state sync or quorum). NaN: not known (the last round failed, or the role lacks pg_monitor and there are walsenders)."),
		lagBytes: gauge("orders_postgres_replication_lag_bytes",
			"The largest replay lag of a standby, in bytes of WAL (pg_current_wal_lsn() - replay_lsn); 0 without standbys. NaN: not known."),
		lagSeconds: gauge("orders_postgres_replication_lag_seconds",
			"The largest replay lag of a standby, in seconds (replay_lag; 0 once it has caught up and nothing was written since). NaN: not known."),
		slots: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "orders_postgres_replication_slots",
			Help: "Physical replication slots on the primary, active (a standby streams through it) or not (its standby is away). NaN: the last round failed."}, []string{"active"}),
		readable: gauge("orders_postgres_replication_stats_readable",
			"1 when the database role may read pg_stat_replication's columns (pg_read_all_stats, granted by pg_monitor), 0 when not. NaN: not known."),
		up: gauge("orders_postgres_replication_probe_success",
			"1 when the last round read the primary's replication state, 0 when it failed (Postgres unreachable, a standby reached, a timeout)."),
	}
	for _, c := range []prometheus.Collector{m.standbys, m.sync, m.lagBytes, m.lagSeconds, m.slots, m.readable, m.up} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("replication metrics: %w", err)
		}
	}
	m.failed()
	return m, nil
}

// publish sets the gauges from a round's report. What the role may not
// read is NaN; without walsenders there is nothing it misses.
func (m *replicationMetrics) publish(r replicationReport) {
	for _, s := range standbyStates {
		m.standbys.WithLabelValues(s).Set(float64(r.standbys[s]))
	}
	unknown := 0.0
	if r.hidden {
		unknown = math.NaN()
	}
	m.sync.Set(float64(r.sync) + unknown)
	m.lagBytes.Set(r.lagBytes + unknown)
	m.lagSeconds.Set(r.lagSeconds + unknown)
	m.slots.WithLabelValues("true").Set(float64(r.slotsActive))
	m.slots.WithLabelValues("false").Set(float64(r.slotsInactive))
	m.readable.Set(0)
	if r.readable {
		m.readable.Set(1)
	}
	m.up.Set(1)
}

// failed sets every value to NaN (not known) and the probe to 0.
func (m *replicationMetrics) failed() {
	for _, s := range standbyStates {
		m.standbys.WithLabelValues(s).Set(math.NaN())
	}
	for _, g := range []prometheus.Gauge{m.sync, m.lagBytes, m.lagSeconds, m.readable,
		m.slots.WithLabelValues("true"), m.slots.WithLabelValues("false")} {
		g.Set(math.NaN())
	}
	m.up.Set(0)
}

// monitorCollector exports what the pg_auto_failover monitor said at the
// last round: orders_pgha_monitor_up and, per data node,
// orders_pgha_node_healthy and orders_pgha_node_state. The nodes' series
// are those of the last successful read; while the monitor cannot be read
// there are none. A round replaces the whole snapshot at once, so a
// scrape never sees half of one.
type monitorCollector struct {
	upDesc, healthyDesc, stateDesc *prometheus.Desc

	mu    sync.Mutex
	up    bool
	nodes []pghaNode // guarded by mu
}

// newMonitorCollector returns the collector, its monitor not yet read.
func newMonitorCollector() *monitorCollector {
	return &monitorCollector{
		upDesc: prometheus.NewDesc("orders_pgha_monitor_up",
			"1 when the last round read the pg_auto_failover monitor (ORDERS_PGHA_MONITOR_URL), 0 when it could not.", nil, nil),
		healthyDesc: prometheus.NewDesc("orders_pgha_node_healthy",
			"The monitor's last health check of a data node: 1 good, 0 bad or not yet checked.", []string{"formation", "node"}, nil),
		stateDesc: prometheus.NewDesc("orders_pgha_node_state",
			"1 for the state a data node's keeper last reported to the monitor (primary, secondary, wait_primary, catchingup, ...).", []string{"formation", "node", "state"}, nil),
	}
}

// Describe sends the three descriptions.
func (c *monitorCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.upDesc
	ch <- c.healthyDesc
	ch <- c.stateDesc
}

// Collect sends the last round's values.
func (c *monitorCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	up := 0.0
	if c.up {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(c.upDesc, prometheus.GaugeValue, up)
	for _, n := range c.nodes {
		healthy := 0.0
		if n.health == 1 {
			healthy = 1
		}
		ch <- prometheus.MustNewConstMetric(c.healthyDesc, prometheus.GaugeValue, healthy, n.formation, n.name)
		ch <- prometheus.MustNewConstMetric(c.stateDesc, prometheus.GaugeValue, 1, n.formation, n.name, n.state)
	}
}

// set records a round: the nodes read, or the monitor down (nodes nil).
func (c *monitorCollector) set(up bool, nodes []pghaNode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.up, c.nodes = up, nodes
}

// replicationWatch reads, every interval and each read within timeout,
// the replication state of the primary the pool reaches and, when a
// monitor is set, the monitor's view of the group, and exports them. It
// logs when a read starts or stops failing, and once that the role lacks
// pg_monitor when that hides a walsender's columns: a single Postgres
// without standbys gives zeros and no log line, whatever the role.
type replicationWatch struct {
	pool           *pgxpool.Pool
	monitor        *pgxpool.Pool // nil without ORDERS_PGHA_MONITOR_URL
	every, timeout time.Duration
	log            *slog.Logger
	m              *replicationMetrics
	mon            *monitorCollector // nil without a monitor

	// What has been logged: read and written by run's goroutine only.
	failing, monFailing, warnedStats bool
}

// newReplicationWatch registers the watch's metrics on reg and, when
// monitorURL is not empty, opens a pool of one connection to the monitor
// (it connects at the first round). close closes that pool.
func newReplicationWatch(pool *pgxpool.Pool, monitorURL string, reg prometheus.Registerer, log *slog.Logger) (*replicationWatch, error) {
	m, err := newReplicationMetrics(reg)
	if err != nil {
		return nil, err
	}
	w := &replicationWatch{pool: pool, every: replicationEvery, timeout: replicationTimeout, log: log, m: m}
	if monitorURL == "" {
		return w, nil
	}
	pc, err := pgxpool.ParseConfig(monitorURL)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", varPGHAMonitorURL, errors.New("cannot be parsed (its text is not shown: it may hold a password)"))
	}
	pc.MaxConns = 1
	if w.monitor, err = pgxpool.NewWithConfig(context.Background(), pc); err != nil {
		return nil, fmt.Errorf("%s: %w", varPGHAMonitorURL, err)
	}
	w.mon = newMonitorCollector()
	if err := reg.Register(w.mon); err != nil {
		w.monitor.Close()
		return nil, fmt.Errorf("monitor metrics: %w", err)
	}
	return w, nil
}

// close closes the monitor's pool, if any.
func (w *replicationWatch) close() {
	if w.monitor != nil {
		w.monitor.Close()
	}
}

// run does a round at once, then every interval, until ctx ends.
func (w *replicationWatch) run(ctx context.Context) error {
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		w.round(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// round reads the primary, then the monitor, each within the timeout.
func (w *replicationWatch) round(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, w.timeout)
	rep, err := readReplication(rctx, w.pool)
	cancel()
	if ctx.Err() != nil {
		return
	}
	w.recordPrimary(rep, err)
	if w.monitor == nil {
		return
	}
	mctx, cancel := context.WithTimeout(ctx, w.timeout)
	nodes, err := readMonitor(mctx, w.monitor)
	cancel()
	if ctx.Err() != nil {
		return
	}
	w.recordMonitor(nodes, err)
}

// recordPrimary publishes a read of the primary, or its failure.
func (w *replicationWatch) recordPrimary(rep replicationReport, err error) {
	if err != nil {
		w.m.failed()
		if !w.failing {
			w.log.Warn("postgres replication: cannot read the primary's replication state; its gauges are NaN until a read succeeds", "err", err)
		}
		w.failing = true
		return
	}
	if w.failing {
		w.log.Info("postgres replication: the primary's replication state is read again")
	}
	w.failing = false
	w.m.publish(rep)
	if rep.hidden && !w.warnedStats {
		w.warnedStats = true
		w.log.Warn(noStats)
	}
}

// recordMonitor publishes a read of the monitor, or its failure. The
// error of a failed read names no password: pgx leaves it out.
func (w *replicationWatch) recordMonitor(nodes []pghaNode, err error) {
	if err != nil {
		w.mon.set(false, nil)
		if !w.monFailing {
			w.log.Warn("pg_auto_failover monitor: cannot read it (orders_pgha_monitor_up 0)", "err", err)
		}
		w.monFailing = true
		return
	}
	if w.monFailing {
		w.log.Info("pg_auto_failover monitor: read again")
	}
	w.monFailing = false
	w.mon.set(true, nodes)
}
