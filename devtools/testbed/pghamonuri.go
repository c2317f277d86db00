package testbed

// MonitorURI is a connection URI of the group's monitor, pg_auto_failover's
// database on the monitor's own address (not behind a proxy or a link, so
// the data nodes' faults do not cut it), as its autoctl_node user, which
// logs in without a password and may read the monitor's view of the
// group (pgautofailover.node).
func (g *PostgresGroup) MonitorURI() string { return g.monitorURI(g.monitor.DirectAddr()) }
