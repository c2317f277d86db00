package testbed

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PostgresNode is the bed's Postgres server.
type PostgresNode struct {
	nd *node
}

// startPostgres starts the bed's Postgres server on p and creates its main
// database.
func startPostgres(ctx context.Context, p provider, opts Options) (*PostgresNode, error) {
	nd, err := newNode(kindPostgres, 1, false)
	if err != nil {
		return nil, err
	}
	pg := &PostgresNode{nd: nd}
	srv, err := postgresServer(filepath.Join(p.dir(), kindPostgres), opts)
	if err == nil {
		nd.srv = srv
		nd.run, err = p.runner(srv)
	}
	if err == nil {
		err = nd.start(ctx, dataWipe)
	}
	if err == nil {
		sctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
		defer cancel()
		err = pg.createMainDB(sctx)
	}
	if err != nil {
		_ = pg.close(context.WithoutCancel(ctx))
		return nil, err
	}
	return pg, nil
}

// postgresServer describes the server in dir: on this machine, initdb with
// the bed's credentials, then postgres on a loopback port, as the postgres
// user when the bed runs as root (PostgreSQL refuses root); in docker, the
// image's own way, which reads the credentials from the environment (the
// official image) or has them baked in (the locally built one).
func postgresServer(dir string, opts Options) (server, error) {
	data, pwfile := filepath.Join(dir, "data"), filepath.Join(dir, "pwfile")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return server{}, err
	}
	if err := os.WriteFile(pwfile, []byte(PostgresPassword+"\n"), 0o600); err != nil {
		return server{}, err
	}
	return server{
		name: kindPostgres, kind: kindPostgres, dir: dir, ports: 1, user: "postgres",
		setup: []string{"initdb", "-D", data, "-U", PostgresUser, "--pwfile=" + pwfile,
			"-A", "scram-sha-256", "-E", "UTF8", "--locale=C", "--no-sync"},
		args: func(ports []int, _ dataMode) []string {
			return []string{"-D", data, "-p", strconv.Itoa(ports[0]), "-k", dir,
				"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300"}
		},
		image: &imageRun{cmd: []string{"postgres", "-c", "max_connections=300"}, port: "5432/tcp", env: map[string]string{
			"POSTGRES_USER": PostgresUser, "POSTGRES_PASSWORD": PostgresPassword, "POSTGRES_DB": PostgresDB}},
		probe:        pingPostgres,
		stop:         syscall.SIGQUIT,
		startTimeout: opts.StartTimeout,
	}, nil
}

// pingPostgres logs in once to the server at addrs[0].
func pingPostgres(ctx context.Context, addrs []string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, postgresDSN(addrs[0], "postgres"))
	if err != nil {
		return err
	}
	return conn.Close(context.Background())
}

// DSN is the URL of the main database (quorumlock), as its owner.
func (p *PostgresNode) DSN() string { return p.dsn(PostgresDB) }

// Addr is the server's host:port.
func (p *PostgresNode) Addr() string { return p.nd.DirectAddr() }

func (p *PostgresNode) dsn(db string) string { return postgresDSN(p.Addr(), db) }

// postgresDSN is the URL of database db at addr, as the bed's user.
func postgresDSN(addr, db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(PostgresUser, PostgresPassword),
		Host:     addr,
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Database is a fresh database with a pool open on it.
type Database struct {
	// DSN is the database's URL, as its owner.
	DSN string
	// Pool is open on DSN with up to MigratedPoolConns connections.
	Pool *pgxpool.Pool

	drop func(context.Context) error
}

// Close closes the pool and drops the database.
func (d Database) Close(ctx context.Context) error {
	if d.Pool != nil {
		d.Pool.Close()
	}
	if d.drop == nil {
		return nil
	}
	return d.drop(ctx)
}

// Setup prepares a new database: it applies migrations, creates tables.
type Setup func(ctx context.Context, dsn string) error

// MigratedPoolConns is the size of the pool MigratedDatabase opens.
const MigratedPoolConns = 20

// MigratedDatabase creates a database, runs each setup on it in order, and
// opens a pool on it. Close the Database to drop it. On error nothing is
// left behind. Tests use bedtest.Migrated, which registers the cleanup.
func (p *PostgresNode) MigratedDatabase(ctx context.Context, setup ...Setup) (Database, error) {
	dsn, drop, err := p.CreateDatabase(ctx)
	if err != nil {
		return Database{}, err
	}
	fail := func(err error) (Database, error) {
		_ = drop(context.WithoutCancel(ctx))
		return Database{}, err
	}
	for _, s := range setup {
		if err := s(ctx, dsn); err != nil {
			return fail(fmt.Errorf("testbed: set up the database: %w", err))
		}
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return fail(fmt.Errorf("testbed: %w", err))
	}
	cfg.MaxConns = MigratedPoolConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fail(fmt.Errorf("testbed: open a pool: %w", err))
	}
	return Database{DSN: dsn, Pool: pool, drop: drop}, nil
}

// CreateDatabase creates an empty database and returns its DSN and a
// function that drops it (forcing out any connection still open).
func (p *PostgresNode) CreateDatabase(ctx context.Context) (string, func(context.Context) error, error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "t_" + hex.EncodeToString(b[:])
	if err := p.exec(ctx, "postgres", "CREATE DATABASE "+name); err != nil {
		return "", nil, fmt.Errorf("testbed: create database: %w", err)
	}
	drop := func(ctx context.Context) error {
		if err := p.exec(ctx, "postgres", "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("testbed: drop database %s: %w", name, err)
		}
		return nil
	}
	return p.dsn(name), drop, nil
}

func (p *PostgresNode) exec(ctx context.Context, db, sql string) error {
	conn, err := pgx.Connect(ctx, p.dsn(db))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// createMainDB creates the quorumlock database when it is not there yet.
func (p *PostgresNode) createMainDB(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, p.dsn("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", PostgresDB).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+PostgresDB)
	return err
}

func (p *PostgresNode) close(ctx context.Context) error { return p.nd.close(ctx) }
