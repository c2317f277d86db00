package testbed

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// PostgresHATimeouts are the failover settings of a Postgres HA group: the
// monitor's (the pgautofailover.* settings of its Postgres), the keepers'
// (the [timeout] section of each data node's pg_autoctl configuration,
// whole seconds) and the data nodes' Postgres replication settings.
//
// Three relations hold them together (read in pg_auto_failover's code,
// seen in the bed's runs):
//
//   - A killed primary is replaced after its detection (at least
//     NodeConsideredUnhealthyTimeout since the keeper's last report, and
//     failed health checks: HealthCheckPeriod, HealthCheckTimeout, the
//     retries), a second of the standby's preparation, PrimaryDemoteTimeout
//     (the monitor cannot tell a dead primary from a cut-off one, so it
//     gives it that long to demote itself), and a fraction of a second.
//   - A primary cut off from the monitor and its standby demotes itself
//     (stops Postgres) once it has heard from neither for
//     NetworkPartitionTimeout; it hears from the standby until its
//     walsender gives up, WalSenderTimeout after the standby's last reply
//     (WalReceiverStatusInterval keeps that one recent). So it stops taking
//     writes about WalSenderTimeout + NetworkPartitionTimeout + a second or
//     two after the cut, which must come before the monitor promotes the
//     standby, NodeConsideredUnhealthyTimeout + a second +
//     PrimaryDemoteTimeout after it. (No commit it took in between
//     returned: synchronous replication waits for the standby.)
//   - The keeper only starts counting once it has seen the standby while
//     the monitor was gone: a primary that lost its walsender before its
//     first failed call to the monitor never demotes itself. So
//     WalSenderTimeout must outlast the keeper's first failed call, which
//     comes 1 to 5 s after the cut (seen: 4 s, when the keeper first spent
//     3.6 s retrying its notification connection).
type PostgresHATimeouts struct {
	// Monitor: how often it checks each node, how long one connection
	// attempt may take, how many failed attempts after the first mark a
	// node unhealthy and how long it waits between them.
	HealthCheckPeriod     time.Duration
	HealthCheckTimeout    time.Duration
	HealthCheckMaxRetries int
	HealthCheckRetryDelay time.Duration
	// NodeConsideredUnhealthyTimeout: a node whose keeper has not reported
	// for this long, and whose health checks fail, has failed.
	NodeConsideredUnhealthyTimeout time.Duration
	// PrimaryDemoteTimeout: how long the monitor gives a failed primary to
	// demote itself before it promotes the standby.
	PrimaryDemoteTimeout time.Duration
	// StartupGracePeriod: no failover this soon after the monitor starts.
	StartupGracePeriod time.Duration

	// Keepers: a primary that has heard from neither the monitor nor a
	// standby for NetworkPartitionTimeout demotes itself.
	NetworkPartitionTimeout time.Duration
	// PreparePromotionCatchup bounds how long a standby being promoted
	// waits to catch up; PreparePromotionWalreceiver how long it waits for
	// its WAL receiver to stop.
	PreparePromotionCatchup     time.Duration
	PreparePromotionWalreceiver time.Duration
	// A keeper whose Postgres failed to restart PostgresRestartFailureMaxRetries
	// times within PostgresRestartFailureTimeout reports it down.
	PostgresRestartFailureTimeout    time.Duration
	PostgresRestartFailureMaxRetries int

	// Postgres on the data nodes: how long a walsender (on the primary)
	// and a walreceiver (on the standby) wait for the other end before
	// they drop the replication connection, and how long a standby waits
	// before it tries again.
	WalSenderTimeout         time.Duration
	WalReceiverTimeout       time.Duration
	WalRetrieveRetryInterval time.Duration
	// WalReceiverStatusInterval: how often a standby reports to the
	// primary unasked, which keeps the walsender's last contact recent.
	WalReceiverStatusInterval time.Duration
}

// DefaultPostgresHATimeouts are pg_auto_failover 2.0's own settings (and
// PostgreSQL's for the replication ones, with pg_auto_failover's 30 s for
// the walsender). A killed primary is replaced after about 50 s.
func DefaultPostgresHATimeouts() PostgresHATimeouts {
	return PostgresHATimeouts{
		HealthCheckPeriod:                5 * time.Second,
		HealthCheckTimeout:               5 * time.Second,
		HealthCheckMaxRetries:            2,
		HealthCheckRetryDelay:            2 * time.Second,
		NodeConsideredUnhealthyTimeout:   20 * time.Second,
		PrimaryDemoteTimeout:             30 * time.Second,
		StartupGracePeriod:               10 * time.Second,
		NetworkPartitionTimeout:          20 * time.Second,
		PreparePromotionCatchup:          30 * time.Second,
		PreparePromotionWalreceiver:      5 * time.Second,
		PostgresRestartFailureTimeout:    20 * time.Second,
		PostgresRestartFailureMaxRetries: 3,
		WalSenderTimeout:                 30 * time.Second,
		WalReceiverTimeout:               60 * time.Second,
		WalRetrieveRetryInterval:         5 * time.Second,
		WalReceiverStatusInterval:        10 * time.Second,
	}
}

// FastPostgresHATimeouts are the bed's default. Measured on an idle
// machine: a killed primary is replaced (a write through the group's URI
// succeeds) after 13 to 13.5 s; a cut-off primary stops taking writes
// after 4 to 9 s, and the standby is promoted after 14 to 16 s.
func FastPostgresHATimeouts() PostgresHATimeouts {
	return PostgresHATimeouts{
		HealthCheckPeriod:                time.Second,
		HealthCheckTimeout:               time.Second,
		HealthCheckMaxRetries:            1,
		HealthCheckRetryDelay:            500 * time.Millisecond,
		NodeConsideredUnhealthyTimeout:   2 * time.Second,
		PrimaryDemoteTimeout:             10 * time.Second,
		StartupGracePeriod:               2 * time.Second,
		NetworkPartitionTimeout:          2 * time.Second,
		PreparePromotionCatchup:          10 * time.Second,
		PreparePromotionWalreceiver:      2 * time.Second,
		PostgresRestartFailureTimeout:    5 * time.Second,
		PostgresRestartFailureMaxRetries: 3,
		WalSenderTimeout:                 6 * time.Second,
		WalReceiverTimeout:               6 * time.Second,
		WalRetrieveRetryInterval:         time.Second,
		WalReceiverStatusInterval:        time.Second,
	}
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// secs rounds d up to whole seconds, at least 1: the keepers' unit.
func secs(d time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
}

// monitorConf are the monitor's settings, for its postgresql.auto.conf.
func (t PostgresHATimeouts) monitorConf() [][2]string {
	return [][2]string{
		{"pgautofailover.health_check_period", ms(t.HealthCheckPeriod)},
		{"pgautofailover.health_check_timeout", ms(t.HealthCheckTimeout)},
		{"pgautofailover.health_check_max_retries", strconv.Itoa(t.HealthCheckMaxRetries)},
		{"pgautofailover.health_check_retry_delay", ms(t.HealthCheckRetryDelay)},
		{"pgautofailover.node_considered_unhealthy_timeout", ms(t.NodeConsideredUnhealthyTimeout)},
		{"pgautofailover.primary_demote_timeout", ms(t.PrimaryDemoteTimeout)},
		{"pgautofailover.startup_grace_period", ms(t.StartupGracePeriod)},
	}
}

// keeperConf are the keepers' settings, as `pg_autoctl config set` names
// them.
func (t PostgresHATimeouts) keeperConf() [][2]string {
	return [][2]string{
		{"timeout.network_partition_timeout", secs(t.NetworkPartitionTimeout)},
		{"timeout.prepare_promotion_catchup", secs(t.PreparePromotionCatchup)},
		{"timeout.prepare_promotion_walreceiver", secs(t.PreparePromotionWalreceiver)},
		{"timeout.postgresql_restart_failure_timeout", secs(t.PostgresRestartFailureTimeout)},
		{"timeout.postgresql_restart_failure_max_retries", strconv.Itoa(t.PostgresRestartFailureMaxRetries)},
	}
}

// dataConf are the data nodes' Postgres replication settings.
func (t PostgresHATimeouts) dataConf() [][2]string {
	return [][2]string{
		{"wal_sender_timeout", ms(t.WalSenderTimeout)},
		{"wal_receiver_timeout", ms(t.WalReceiverTimeout)},
		{"wal_retrieve_retry_interval", ms(t.WalRetrieveRetryInterval)},
		{"wal_receiver_status_interval", strconv.Itoa(max(1, int(t.WalReceiverStatusInterval.Seconds())))},
	}
}

// writePGConf writes the settings of a Postgres of the group into its
// data directory, after initdb and before its first start: they go to
// postgresql.auto.conf, which Postgres reads after pg_auto_failover's own
// include file, and they replace its pg_hba.conf. A standby gets both
// from the primary with its base backup.
func writePGConf(data string, settings [][2]string, hba string) error {
	var b []byte
	b = append(b, "# quorumlock test bed\n"...)
	for _, s := range settings {
		b = fmt.Appendf(b, "%s = '%s'\n", s[0], s[1])
	}
	if err := os.WriteFile(filepath.Join(data, "postgresql.auto.conf"), b, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(data, "pg_hba.conf"), []byte(hba), 0o600)
}

// The group's pg_hba.conf rules. Every TCP connection reaches a server
// from a loopback proxy, at 127.0.0.1. pg_auto_failover's own users (the
// monitor's health checks, replication, the keepers on the monitor) log
// in without a password, as with its --auth trust; the bed's user with its
// password. Local socket connections, in the group's private socket
// directory, are the keepers' and the bed's own, as the postgres user.
const (
	dataHBA = `local all all trust
local replication all trust
host all pgautofailover_monitor 127.0.0.1/32 trust
host replication pgautofailover_replicator 127.0.0.1/32 trust
host all pgautofailover_replicator 127.0.0.1/32 trust
host all all 127.0.0.1/32 scram-sha-256
`
	monitorHBA = `local all all trust
host pg_auto_failover autoctl_node 127.0.0.1/32 trust
host all all 127.0.0.1/32 scram-sha-256
`
)

// setKeeperTimeouts writes the keepers' timeouts into each data node's
// pg_autoctl configuration file, has its running service reload it, and
// waits until its keeper says it has.
//
// Not `pg_autoctl config set`, once per setting: each one signals the
// running service to reload, and the next one may read the file while the
// service rewrites it (seen: "Failed to find section pg_autoctl", exit
// status 12). Setting them before the service first runs would cost each
// node a stop and a start of its Postgres, 3 s of the group's start.
func (g *PostgresGroup) setKeeperTimeouts(ctx context.Context) error {
	for _, n := range g.Nodes {
		if err := n.setKeeperConf(ctx, g.timeouts.keeperConf()); err != nil {
			return fmt.Errorf("%s: the keeper's timeouts: %w", n.Name(), err)
		}
	}
	return nil
}

// setKeeperConf replaces the file at once (a new file renamed over it),
// then sends SIGHUP to the service, which passes it on to the keeper.
func (n *PostgresHANode) setKeeperConf(ctx context.Context, settings [][2]string) error {
	path := filepath.Join(n.Dir(), "xdg", "config", "pg_autoctl", n.srv.dataDir(), "pg_autoctl.cfg")
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	tmp := path + ".quorumlock"
	if err := os.WriteFile(tmp, setINI(old, settings), 0o644); err != nil {
		return err
	}
	if n.g.runAs != nil {
		if err := chownAll(tmp, n.g.runAs); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	logPath := filepath.Join(n.Dir(), kindAutoctl+".log")
	var from int64
	if fi, err := os.Stat(logPath); err == nil {
		from = fi.Size()
	}
	run, ok := n.run.(pghaRunner)
	if !ok {
		return fmt.Errorf("%s: not a member of the group", n.Name())
	}
	if err := run.reload(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for !strings.Contains(tailFrom(logPath, from, 1<<20), "Reloaded the new configuration") {
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return fmt.Errorf("the keeper did not reload its configuration: %w", err)
		}
	}
	return nil
}

// setINI sets each "section.key" of settings to its value in the text of
// an INI file, adding the keys, and their section, that it lacks.
func setINI(text []byte, settings [][2]string) []byte {
	lines := strings.Split(strings.TrimRight(string(text), "\n"), "\n")
	for _, kv := range settings {
		section, key, _ := strings.Cut(kv[0], ".")
		line := key + " = " + kv[1]
		cur, end, found := "", -1, false
		for i, l := range lines {
			t := strings.TrimSpace(l)
			if strings.HasPrefix(t, "[") && strings.HasSuffix(t, "]") {
				cur = t[1 : len(t)-1]
				continue
			}
			if cur != section {
				continue
			}
			end = i
			if k, _, ok := strings.Cut(t, "="); ok && strings.TrimSpace(k) == key {
				lines[i], found = line, true
			}
		}
		switch {
		case found:
		case end >= 0:
			lines = slices.Insert(lines, end+1, line)
		default:
			lines = append(lines, "", "["+section+"]", line)
		}
	}
	return []byte(strings.Join(lines, "\n") + "\n")
}
