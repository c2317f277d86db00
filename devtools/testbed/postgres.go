package testbed

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PostgresNode is the bed's Postgres server.
type PostgresNode struct {
	host       string
	port       int
	stopServer func(context.Context) error
}

// DSN is the URL of the main database (quorumlock), as its owner.
func (p *PostgresNode) DSN() string { return p.dsn(PostgresDB) }

// Addr is the server's host:port.
func (p *PostgresNode) Addr() string { return net.JoinHostPort(p.host, strconv.Itoa(p.port)) }

func (p *PostgresNode) dsn(db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(PostgresUser, PostgresPassword),
		Host:     p.Addr(),
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

// waitReady polls until the server accepts a login, the process exits
// (exited is closed), or ctx ends.
func (p *PostgresNode) waitReady(ctx context.Context, exited <-chan struct{}) error {
	var last error
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, p.dsn("postgres"))
		cancel()
		if err == nil {
			_ = conn.Close(context.Background())
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("postgres at %s not ready: %w (last: %v)", p.Addr(), ctx.Err(), last)
		case <-exited:
			return fmt.Errorf("postgres at %s exited during start (last: %v)", p.Addr(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
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

func (p *PostgresNode) close(ctx context.Context) error {
	if p.stopServer == nil {
		return nil
	}
	return p.stopServer(ctx)
}
