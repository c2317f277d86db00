package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// startMonitor creates the monitor's Postgres and pg_auto_failover's
// extension in it, and starts its pg_autoctl service on a loopback port.
func (g *PostgresGroup) startMonitor(ctx context.Context, opts Options) error {
	nd, port := g.monitor, g.monPort
	srv, err := g.memberServer(pghaMonitor, port, opts, func(ctx context.Context, _ []string) error {
		return g.onPort(ctx, port, pghaMonitorDB, func(c *pgx.Conn) error {
			_, err := c.Exec(ctx, "SELECT count(*) FROM pgautofailover.formation")
			return err
		})
	})
	if err != nil {
		return err
	}
	if err := g.setRunner(nd, srv, port); err != nil {
		return err
	}
	conf := append(g.commonConf(pghaMonitor), g.timeouts.monitorConf()...)
	if err := g.initdb(ctx, nd, conf, monitorHBA); err != nil {
		return err
	}
	err = g.exec(ctx, nd, g.bins.autoctl, "create", "monitor", "--pgctl", g.bins.pgctl, "--pgdata", srv.dataDir(),
		"--pgport", strconv.Itoa(port), "--hostname", "127.0.0.1", "--skip-pg-hba", "--no-ssl")
	if err == nil {
		// create monitor has no --listen; without this it listens on '*'.
		err = g.exec(ctx, nd, g.bins.autoctl, "config", "set", "--pgdata", srv.dataDir(), "postgresql.listen_addresses", "127.0.0.1")
	}
	if err != nil {
		return err
	}
	return nd.start(ctx, dataKeep)
}

// memberServer describes the pg_autoctl service of one member of the
// group, in its own directory, listening on port: `pg_autoctl run`, as the
// postgres user when the bed runs as root, with its configuration and
// state files in its directory.
func (g *PostgresGroup) memberServer(name string, port int, opts Options, probe func(context.Context, []string) error) (server, error) {
	dir := filepath.Join(g.dir, name)
	env := []string{
		"HOME=" + dir,
		"XDG_CONFIG_HOME=" + filepath.Join(dir, "xdg", "config"),
		"XDG_DATA_HOME=" + filepath.Join(dir, "xdg", "data"),
		"XDG_RUNTIME_DIR=" + filepath.Join(dir, "xdg", "run"),
		"PGHOST=" + g.sock,
		"PGPORT=" + strconv.Itoa(port),
		"PATH=" + filepath.Dir(g.bins.pgctl) + ":/usr/bin:/bin",
	}
	srv := server{name: name, kind: kindAutoctl, dir: dir, ports: 1, env: env, user: "postgres",
		probe: probe, stop: syscall.SIGKILL, startTimeout: opts.StartTimeout}
	srv.args = func([]int, dataMode) []string { return []string{"run", "--pgdata", srv.dataDir()} }
	for _, d := range []string{"config", "data", "run"} {
		if err := os.MkdirAll(filepath.Join(dir, "xdg", d), 0o700); err != nil {
			return server{}, err
		}
	}
	if g.runAs != nil {
		if err := chownAll(dir, g.runAs); err != nil {
			return server{}, err
		}
	}
	return srv, nil
}

// setRunner gives nd its server and the provider's runner of a member's
// service, which sends faults to the whole service.
func (g *PostgresGroup) setRunner(nd *node, srv server, port int) error {
	run, err := g.prov.pghaRunner(srv, port, g.runAs)
	if err != nil {
		return err
	}
	nd.srv, nd.run = srv, run
	return nil
}

// commonConf are the settings of every Postgres of the group. Its
// socket directory is the group's own; cluster_name puts the bed's
// directory in each server process's title. A checkpoint every 30 s keeps
// the crash recovery of a killed node short: a killed primary restarted
// after minutes of load otherwise replayed its WAL past the bed's start
// timeout (60 s) before it answered.
func (g *PostgresGroup) commonConf(name string) [][2]string {
	return [][2]string{
		{"unix_socket_directories", g.sock},
		{"cluster_name", filepath.Base(filepath.Dir(g.dir)) + "-" + name},
		{"logging_collector", "off"},
		{"shared_buffers", "32MB"},
		{"max_connections", "100"},
		{"jit", "off"},
		{"checkpoint_timeout", "30s"},
	}
}

// initdb initialises the data directory of member nd and writes its
// settings. --no-sync only skips initdb's own final flush: the server runs
// with fsync on, so a commit it acknowledges is on disk.
func (g *PostgresGroup) initdb(ctx context.Context, nd *node, conf [][2]string, hba string) error {
	data := nd.srv.dataDir()
	err := g.exec(ctx, nd, g.bins.initdb, "-D", data, "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	if err != nil {
		return err
	}
	return writePGConf(data, conf, hba)
}

// exec runs a command to completion as member nd's user and in its
// environment, with its output in the member's log (see pghaRunner.exec).
func (g *PostgresGroup) exec(ctx context.Context, nd *node, argv ...string) error {
	run, ok := nd.run.(pghaRunner)
	if !ok {
		return fmt.Errorf("%s: not a member of the group: %w", nd.Name(), errors.ErrUnsupported)
	}
	return run.exec(ctx, argv...)
}

// runCtl runs pg_autoctl with args in the environment of member nd.
func (g *PostgresGroup) runCtl(ctx context.Context, nd *node, args ...string) error {
	return g.exec(ctx, nd, append([]string{g.bins.autoctl}, args...)...)
}

// monitorURI is the monitor's URI for a keeper that reaches it at addr.
func (g *PostgresGroup) monitorURI(addr string) string {
	return "postgres://autoctl_node@" + addr + "/" + pghaMonitorDB + "?sslmode=disable&connect_timeout=2"
}

// superuser is the OS user the servers run as, their local superuser.
func (g *PostgresGroup) superuser() string {
	if g.runAs != nil {
		return g.runAs.Username
	}
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return "postgres"
}

// onPort runs fn on a connection to database db of the group's server on
// port, through the group's socket directory, as the local superuser.
func (g *PostgresGroup) onPort(ctx context.Context, port int, db string, fn func(*pgx.Conn) error) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable", g.sock, port, g.superuser(), db))
	if err != nil {
		return err
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	return fn(c)
}

// onMonitor runs fn on a connection to the monitor's database.
func (g *PostgresGroup) onMonitor(ctx context.Context, fn func(*pgx.Conn) error) error {
	return g.onPort(ctx, g.monPort, pghaMonitorDB, fn)
}
