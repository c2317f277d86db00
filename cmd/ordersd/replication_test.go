package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/internal/syncbuf"
)

// TestSummarize: walsenders are counted by state, the synchronous ones
// (sync or quorum) apart; the lag is the largest; a NULL state is unknown
// and a NULL lag counts as none.
func TestSummarize(t *testing.T) {
	str := func(s string) *string { return &s }
	num := func(f float64) *float64 { return &f }
	r := summarize(true, []walSender{
		{state: str("streaming"), syncState: str("quorum"), lagBytes: num(100), lagSeconds: num(0.5)},
		{state: str("streaming"), syncState: str("sync"), lagBytes: num(4096)},
		{state: str("catchup"), syncState: str("async"), lagBytes: num(10), lagSeconds: num(3)},
		{},
	})
	if r.standbys["streaming"] != 2 || r.standbys["catchup"] != 1 || r.standbys["unknown"] != 1 || r.sync != 2 ||
		r.lagBytes != 4096 || r.lagSeconds != 3 || !r.readable {
		t.Fatalf("summary: %+v", r)
	}
	if r := summarize(true, nil); r.sync != 0 || r.lagBytes != 0 || r.lagSeconds != 0 || len(r.standbys) != 0 {
		t.Fatalf("no standbys: %+v", r)
	}
}

// TestPublishUnreadable: what a role without pg_monitor cannot read of a
// walsender is NaN, not 0, so that no alert takes it for a missing
// standby (without walsenders nothing is missed); a failed round makes
// every value NaN and the probe 0.
func TestPublishUnreadable(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newReplicationMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.publish(summarize(false, []walSender{{}}))
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"orders_postgres_standbys", []string{"state", "unknown"}, 1},
		{"orders_postgres_standbys", []string{"state", "streaming"}, 0},
		{"orders_postgres_sync_standbys", nil, math.NaN()},
		{"orders_postgres_replication_lag_bytes", nil, math.NaN()},
		{"orders_postgres_replication_stats_readable", nil, 0},
		{"orders_postgres_replication_probe_success", nil, 1},
	} {
		if got := gaugeOf(t, reg, c.name, c.labels...); !same(got, c.want) {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// Without walsenders the role misses nothing: a single Postgres.
	m.publish(summarize(false, nil))
	if got := gaugeOf(t, reg, "orders_postgres_sync_standbys"); got != 0 {
		t.Errorf("no walsender, no pg_monitor: sync %v, want 0", got)
	}
	m.failed()
	if got := gaugeOf(t, reg, "orders_postgres_replication_probe_success"); got != 0 {
		t.Errorf("probe after a failed round: %v", got)
	}
	if got := gaugeOf(t, reg, "orders_postgres_standbys", "state", "unknown"); !math.IsNaN(got) {
		t.Errorf("standbys after a failed round: %v", got)
	}
}

// TestMonitorURLIsASecret: ORDERS_PGHA_MONITOR_URL comes from the
// environment or its _FILE; one that cannot be parsed is refused without
// being shown, and -h does not show it either.
func TestMonitorURLIsASecret(t *testing.T) {
	validEnv(t)
	const password = "monitor-password-that-must-not-leak"
	t.Setenv(varPGHAMonitorURL, "postgres://mon:"+password+"@127.0.0.1:notaport/pg_auto_failover")
	_, err := parseConfig(nil, io.Discard)
	if err == nil || !strings.Contains(err.Error(), varPGHAMonitorURL) || strings.Contains(err.Error(), password) {
		t.Fatalf("a bad monitor URL: %v", err)
	}
	var help bytes.Buffer
	if _, err := parseConfig([]string{"-h"}, &help); err == nil || strings.Contains(help.String(), password) ||
		!strings.Contains(help.String(), varPGHAMonitorURL+"_FILE") {
		t.Fatalf("-h: %v\n%s", err, help.String())
	}
	os.Unsetenv(varPGHAMonitorURL)
	file := filepath.Join(t.TempDir(), "monitor")
	want := "postgres://mon:" + password + "@127.0.0.1:5432/pg_auto_failover"
	if err := os.WriteFile(file, []byte(want+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(varPGHAMonitorURL+"_FILE", file)
	c, err := parseConfig(nil, io.Discard)
	if err != nil || c.pghaMonitorURL != want {
		t.Fatalf("from a file: %q, %v", c.pghaMonitorURL, err)
	}
}

// TestReplicationSinglePostgres: ordersd on one Postgres that has no
// standby exports 0 standbys, 0 synchronous and no lag, and logs nothing
// about replication; with a monitor URL whose server does not answer,
// orders_pgha_monitor_up is 0, said once in the log, without the URL's
// password.
func TestReplicationSinglePostgres(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Redis: 1, Postgres: true})
	t.Setenv("ORDERS_DATABASE_URL", bedtest.NewDatabase(t, bed.Postgres))
	t.Setenv("ORDERS_REDIS_ADDRS", strings.Join(bed.RedisAddrs(), ","))
	t.Setenv("ORDERS_JWT_SECRET", testJWTSecret)
	t.Setenv("ORDERS_LISTEN", "127.0.0.1:0")
	t.Setenv("ORDERS_PAYMENT_URL", "http://127.0.0.1:9")
	t.Setenv("ORDERS_LOCK", "off")
	const password = "monitor-password-that-must-not-leak"
	t.Setenv(varPGHAMonitorURL, "postgres://mon:"+password+"@"+closedAddr(t)+"/pg_auto_failover?sslmode=disable")
	var log syncbuf.Buffer
	base, stopServe := startServeLog(t, &log)
	stop := sync.OnceValue(stopServe)
	defer func() { _ = stop() }()
	var metrics string
	deadline := time.Now().Add(20 * time.Second)
	for metrics == "" || seriesOf(metrics, "orders_postgres_replication_probe_success") != "1" {
		if time.Now().After(deadline) {
			t.Fatalf("no successful replication round within 20s:\n%s", grepLines(metrics, "orders_p"))
		}
		time.Sleep(100 * time.Millisecond)
		_, metrics = get(t, base, "/metrics")
	}
	for series, want := range map[string]string{
		`orders_postgres_standbys{state="streaming"}`:      "0",
		`orders_postgres_standbys{state="unknown"}`:        "0",
		"orders_postgres_sync_standbys":                    "0",
		"orders_postgres_replication_lag_bytes":            "0",
		"orders_postgres_replication_lag_seconds":          "0",
		`orders_postgres_replication_slots{active="true"}`: "0",
		"orders_postgres_replication_stats_readable":       "1",
		"orders_pgha_monitor_up":                           "0",
	} {
		if got := seriesOf(metrics, series); got != want {
			t.Errorf("%s = %q, want %s", series, got, want)
		}
	}
	if strings.Contains(metrics, "orders_pgha_node_") {
		t.Errorf("node series without a monitor:\n%s", grepLines(metrics, "orders_pgha"))
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	out := log.String()
	if got := grepLines(out, "postgres replication"); got != "" {
		t.Errorf("the replication watch logged on a single Postgres:\n%s", got)
	}
	if n := strings.Count(out, "pg_auto_failover monitor: cannot read it"); n != 1 || strings.Contains(out, password) {
		t.Errorf("the monitor's failure logged %d times (want 1), or with its password:\n%s", n, grepLines(out, "monitor"))
	}
}

// TestReplicationHA, on the bed's pg_auto_failover group: one
// synchronous standby streaming through its slot, both nodes healthy
// according to the monitor; a role without pg_monitor reads no states
// (NaN, said once) until it is granted pg_monitor; once the standby is
// killed no synchronous standby is left, its slot stays, and the monitor
// reports it unhealthy and the primary in wait_primary.
func TestReplicationHA(t *testing.T) {
	start := time.Now()
	bed := bedtest.Start(t, testbed.Options{PostgresHA: true})
	t.Logf("the group started in %v", time.Since(start).Round(time.Millisecond))
	g := bed.PostgresHA
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	primary, err := g.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	standby := g.Nodes[0]
	if standby == primary {
		standby = g.Nodes[1]
	}
	w, reg, _ := haWatch(t, g.URI(), g.MonitorURI())
	until(t, ctx, w, "one synchronous standby, both nodes healthy", func() bool {
		return gaugeOf(t, reg, "orders_postgres_sync_standbys") == 1 &&
			gaugeOf(t, reg, "orders_postgres_standbys", "state", "streaming") == 1 &&
			gaugeOf(t, reg, "orders_postgres_replication_slots", "active", "true") == 1 &&
			gaugeOf(t, reg, "orders_postgres_replication_lag_bytes") >= 0 &&
			gaugeOf(t, reg, "orders_pgha_monitor_up") == 1 &&
			gaugeOf(t, reg, "orders_pgha_node_healthy", "node", standby.Name()) == 1 &&
			gaugeOf(t, reg, "orders_pgha_node_state", "node", primary.Name(), "state", "primary") == 1
	})
	withoutMonitorRole(t, ctx, g.URI())

	if err := standby.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	until(t, ctx, w, "no synchronous standby, its slot inactive", func() bool {
		return gaugeOf(t, reg, "orders_postgres_sync_standbys") == 0 &&
			gaugeOf(t, reg, "orders_postgres_standbys", "state", "streaming") == 0 &&
			gaugeOf(t, reg, "orders_postgres_replication_slots", "active", "false") == 1
	})
	t.Logf("no synchronous standby %v after the kill", time.Since(killed).Round(time.Millisecond))
	until(t, ctx, w, "the monitor: the standby unhealthy, the primary in wait_primary", func() bool {
		return gaugeOf(t, reg, "orders_pgha_node_healthy", "node", standby.Name()) == 0 &&
			gaugeOf(t, reg, "orders_pgha_node_state", "node", primary.Name(), "state", "wait_primary") == 1
	})
	t.Logf("the monitor saw it %v after the kill", time.Since(killed).Round(time.Millisecond))
}

// withoutMonitorRole: a role without pg_monitor sees the walsender but
// not its state: the standby counts as unknown, the synchronous count is
// NaN, and the watch says so once; granted pg_monitor, it reads them.
func withoutMonitorRole(t *testing.T, ctx context.Context, uri string) {
	t.Helper()
	const role, password = "orders_plain", "orders-plain-password"
	super, err := pgx.Connect(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	defer super.Close(context.WithoutCancel(ctx))
	if _, err := super.Exec(ctx, "CREATE ROLE "+role+" LOGIN PASSWORD '"+password+"'"); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(uri)
	if err != nil {
		t.Fatal(err)
	}
	plain := strings.Replace(uri, cfg.User+":"+cfg.Password+"@", role+":"+password+"@", 1)
	w, reg, log := haWatch(t, plain, "")
	// The standby's one walsender, seen without its state. A standby that
	// reconnected on a loaded machine can leave its old walsender listed a
	// moment longer: wait for one.
	until(t, ctx, w, "without pg_monitor: one standby of unknown state, no sync count, stats unreadable", func() bool {
		return gaugeOf(t, reg, "orders_postgres_standbys", "state", "unknown") == 1 &&
			math.IsNaN(gaugeOf(t, reg, "orders_postgres_sync_standbys")) &&
			gaugeOf(t, reg, "orders_postgres_replication_stats_readable") == 0 &&
			gaugeOf(t, reg, "orders_postgres_replication_probe_success") == 1
	})
	if n := strings.Count(log.String(), "grant it pg_monitor"); n != 1 {
		t.Fatalf("the missing pg_monitor logged %d times, want 1:\n%s", n, log.String())
	}
	if _, err := super.Exec(ctx, "GRANT pg_monitor TO "+role); err != nil {
		t.Fatal(err)
	}
	until(t, ctx, w, "the synchronous standby read with pg_monitor", func() bool {
		return gaugeOf(t, reg, "orders_postgres_sync_standbys") == 1 &&
			gaugeOf(t, reg, "orders_postgres_replication_stats_readable") == 1
	})
}

// haWatch returns a replication watch over a pool on uri (with ordersd's
// defaults) and, when monitorURI is not empty, the monitor; its registry
// and its log. Both pools are closed when t ends.
func haWatch(t *testing.T, uri, monitorURI string) (*replicationWatch, *prometheus.Registry, *syncbuf.Buffer) {
	t.Helper()
	dsn, err := withDBDefaults(uri)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	reg, log := prometheus.NewRegistry(), &syncbuf.Buffer{}
	w, err := newReplicationWatch(pool, monitorURI, reg, slog.New(slog.NewTextHandler(log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.close)
	return w, reg, log
}

// until runs rounds of w, 100 ms apart, until ok holds; it fails the test
// when ctx ends or 60 s pass first.
func until(t *testing.T, ctx context.Context, w *replicationWatch, what string, ok func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		w.round(ctx)
		if ok() {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within a minute", what)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// gaugeOf is the value of the gauge name whose labels include the given
// name/value pairs, or -1 when there is none.
func gaugeOf(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue metrics
				}
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

// same is ==, with NaN equal to NaN.
func same(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }

// seriesOf is the value of series in a /metrics text, or "".
func seriesOf(text, series string) string {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// closedAddr is a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	_ = ln.Close()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(addr.Port))
}
