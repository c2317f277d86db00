package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/quorumlock/quorumlock/quorum"
)

// Guard states of a node, as status reports them.
const (
	guardPastWindow = "past_window" // up for longer than the restart window: votes
	guardTrusted    = "trusted"     // the marker holds its run_id (TrustNode): votes
	guardDurable    = "durable"     // durable nodes, AOF on, marker survived: votes
	guardWarming    = "warming"     // inside the window, not known to have kept its data: waits
	guardUnknown    = "unknown"     // not reachable, or INFO lacks what the guard reads
)

// nodeStatus is one master as status reports it.
type nodeStatus struct {
	Addr      string  `json:"addr"`
	Reachable bool    `json:"reachable"`
	LatencyMS float64 `json:"latency_ms"`
	Version   string  `json:"version,omitempty"`
	UptimeS   int64   `json:"uptime_s"`
	Votes     bool    `json:"votes"`
	Guard     string  `json:"guard"`
	WaitMS    int64   `json:"wait_ms,omitempty"` // warming: at most this long until it votes
	Detail    string  `json:"detail"`
	Error     string  `json:"error,omitempty"`
}

// dbStatus is the database as status reports it.
type dbStatus struct {
	Configured bool    `json:"configured"`
	URL        string  `json:"url,omitempty"` // password redacted
	Reachable  bool    `json:"reachable"`
	LatencyMS  float64 `json:"latency_ms,omitempty"`
	Version    string  `json:"version,omitempty"`
	Error      string  `json:"error,omitempty"`
}

// statusReport is the output of status.
type statusReport struct {
	Nodes     []nodeStatus `json:"nodes"`
	WindowMS  int64        `json:"window_ms"`
	Durable   bool         `json:"durable"`
	Reachable int          `json:"reachable"`
	Voters    int          `json:"voters"`
	Majority  int          `json:"majority"`
	Lockable  bool         `json:"lockable"`
	Database  dbStatus     `json:"database"`
}

func (a *app) statusCmd() *cobra.Command {
	var v flagVars
	const groups = withRedis | withGuard | withDB
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show every Redis master: reachable, latency, version, uptime, whether it may vote",
		Long: `status asks every Redis master, in parallel, for a PING (its round-trip
time on an open connection is the latency), INFO and the restart marker, and
says whether the lock's restart guard lets it vote now: a node votes once it
has been up for the restart window (ORDERS_LOCK_TTL, ordersd's lock TTL), or
sooner when its marker (` + quorum.BootMarkerKey + `) holds its run_id (quorumctl trust), or,
with ORDERS_REDIS_DURABLE, when its AOF is on and its marker survived the
restart. It also checks the database when one is configured.

Exit status 1 when fewer than a majority of the masters may vote, or the
configured database does not answer.`,
		Args: cobra.NoArgs,
		RunE: a.phase.RunE(func(cmd *cobra.Command, _ []string) error {
			s, err := a.settings(cmd, &v, groups)
			if err != nil {
				return err
			}
			return a.status(cmd.Context(), s)
		}),
	}
	v.addFlags(cmd, groups)
	return cmd
}

func (a *app) status(ctx context.Context, s settings) error {
	cs := s.clients()
	defer closeAll(cs)
	rep := statusReport{Nodes: make([]nodeStatus, len(cs)), WindowMS: s.window.Milliseconds(), Durable: s.durable, Majority: majority(len(cs))}
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() { rep.Nodes[i] = probeNode(ctx, c, s) })
	}
	if s.databaseURL != "" {
		wg.Go(func() { rep.Database = a.probeDB(ctx, s) })
	}
	wg.Wait()
	for _, n := range rep.Nodes {
		if n.Reachable {
			rep.Reachable++
		}
		if n.Votes {
			rep.Voters++
		}
	}
	rep.Lockable = rep.Voters >= rep.Majority
	if s.json {
		if err := a.writeJSON(rep); err != nil {
			return err
		}
	} else {
		a.printStatus(rep)
	}
	var problems []string
	if !rep.Lockable {
		problems = append(problems, fmt.Sprintf("only %d of %d masters may vote, a majority is %d: the lock cannot be taken", rep.Voters, len(rep.Nodes), rep.Majority))
	}
	if rep.Database.Configured && !rep.Database.Reachable {
		problems = append(problems, "the database does not answer")
	}
	if len(problems) > 0 {
		return fmt.Errorf("unhealthy: %s", strings.Join(problems, "; "))
	}
	return nil
}

func (a *app) printStatus(rep statusReport) {
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tREACHABLE\tLATENCY\tVERSION\tUPTIME\tVOTES\tWHY")
	for _, n := range rep.Nodes {
		if !n.Reachable {
			fmt.Fprintf(tw, "%s\tno\t-\t-\t-\tno\t%s\n", n.Addr, n.Error)
			continue
		}
		votes := "no"
		if n.Votes {
			votes = "yes"
		}
		fmt.Fprintf(tw, "%s\tyes\t%.2fms\t%s\t%v\t%s\t%s\n", n.Addr, n.LatencyMS, n.Version, time.Duration(n.UptimeS)*time.Second, votes, n.Detail)
	}
	_ = tw.Flush()
	durable := "no"
	if rep.Durable {
		durable = "yes"
	}
	fmt.Fprintf(a.stdout, "restart window %v (ORDERS_LOCK_TTL), durable nodes: %s\n", time.Duration(rep.WindowMS)*time.Millisecond, durable)
	verdict := "the lock can be taken"
	if !rep.Lockable {
		verdict = "the lock cannot be taken"
	}
	fmt.Fprintf(a.stdout, "quorum: %d of %d reachable, %d may vote, %d needed: %s\n", rep.Reachable, len(rep.Nodes), rep.Voters, rep.Majority, verdict)
	switch db := rep.Database; {
	case !db.Configured:
		fmt.Fprintln(a.stdout, "database: not configured (ORDERS_DATABASE_URL)")
	case db.Reachable:
		fmt.Fprintf(a.stdout, "database: %s reachable, %.2fms, PostgreSQL %s\n", db.URL, db.LatencyMS, db.Version)
	default:
		fmt.Fprintf(a.stdout, "database: %s unreachable: %s\n", db.URL, db.Error)
	}
}

// probeNode asks one master for what status shows. The latency is the
// round trip of a PING on a connection already open.
func probeNode(ctx context.Context, c *redis.Client, s settings) nodeStatus {
	n := nodeStatus{Addr: c.Options().Addr, Guard: guardUnknown}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil { // opens the connection
		n.Error = err.Error()
		return n
	}
	start := time.Now()
	if err := c.Ping(ctx).Err(); err != nil {
		n.Error = err.Error()
		return n
	}
	n.Reachable, n.LatencyMS = true, ms(time.Since(start))
	pipe := c.Pipeline()
	server := pipe.Info(ctx, "server")
	persistence := pipe.Info(ctx, "persistence")
	marker := pipe.Get(ctx, quorum.BootMarkerKey)
	_, _ = pipe.Exec(ctx) // each command's error is read below
	if err := errors.Join(server.Err(), persistence.Err()); err != nil {
		n.Error, n.Detail = err.Error(), "cannot read INFO: "+err.Error()
		return n
	}
	info := server.Val()
	n.Version = infoValue(info, "redis_version")
	up, err := strconv.ParseInt(infoValue(info, "uptime_in_seconds"), 10, 64)
	if err != nil {
		n.Detail = "INFO server has no uptime_in_seconds: the guard refuses the node"
		return n
	}
	n.UptimeS = up
	m, err := marker.Result()
	hasMarker := err == nil
	if err != nil && !errors.Is(err, redis.Nil) {
		n.Error = err.Error()
		n.Detail = "cannot read the restart marker: " + err.Error()
		return n
	}
	g := guardOf(up, infoValue(info, "run_id"), m, hasMarker, infoValue(persistence.Val(), "aof_enabled") == "1", s.durable, s.window)
	n.Votes, n.Guard, n.Detail = g.votes, g.state, g.detail
	if g.wait > 0 {
		n.WaitMS = g.wait.Milliseconds()
	}
	return n
}

// guardVerdict is what the restart guard decides about a node.
type guardVerdict struct {
	votes  bool
	state  string
	wait   time.Duration // warming: at most this long until it votes
	detail string
}

// guardOf decides as the lock's acquire script does (quorum/scripts/
// acquire.lua), from the node's uptime in whole seconds, its run_id, its
// restart marker, whether its AOF is on, whether the nodes are declared
// durable, and the restart window. The time elapsed since the start is
// more than uptime-1 seconds, so that is what counts against the window.
func guardOf(uptime int64, runID, marker string, hasMarker, aof, durable bool, window time.Duration) guardVerdict {
	safe := time.Duration(uptime-1) * time.Second
	if safe >= window {
		return guardVerdict{votes: true, state: guardPastWindow, detail: fmt.Sprintf("up longer than the %v window", window)}
	}
	if runID == "" {
		return guardVerdict{state: guardUnknown, detail: "INFO server has no run_id: the guard refuses the node"}
	}
	if hasMarker && marker == runID {
		return guardVerdict{votes: true, state: guardTrusted, detail: "trusted: its restart marker holds its run_id"}
	}
	if durable && hasMarker && aof {
		return guardVerdict{votes: true, state: guardDurable, detail: "durable: AOF on and its restart marker survived the restart"}
	}
	wait := window - safe
	why := "no restart marker"
	switch {
	case hasMarker && !durable:
		why = "its marker holds another run_id (it restarted since it was trusted)"
	case hasMarker && !aof:
		why = "durable, but its AOF is off"
	}
	return guardVerdict{state: guardWarming, wait: wait, detail: fmt.Sprintf("warming: up %ds of the %v window, %s; votes in at most %v", uptime, window, why, wait)}
}

// infoValue returns the value of field in an INFO reply, or "".
func infoValue(info, field string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// probeDB connects to the database and reads its version.
func (a *app) probeDB(ctx context.Context, s settings) dbStatus {
	d := dbStatus{Configured: true, URL: redactDSN(s.databaseURL)}
	conn, err := s.connectDB(ctx)
	if err != nil {
		d.Error = a.scrub(err.Error())
		return d
	}
	defer conn.Close(context.WithoutCancel(ctx))
	qctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	start := time.Now()
	if err := conn.QueryRow(qctx, "SHOW server_version").Scan(&d.Version); err != nil {
		d.Error = a.scrub(err.Error())
		return d
	}
	d.Reachable, d.LatencyMS = true, ms(time.Since(start))
	return d
}
