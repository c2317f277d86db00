package testbed

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"testing"
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

// Database is a fresh database of one test with a pool open on it.
type Database struct {
	// DSN is the database's URL, as its owner.
	DSN string
	// Pool is open on DSN with up to MigratedPoolConns connections; it is
	// closed when the test ends, before the database is dropped.
	Pool *pgxpool.Pool
}

// Setup prepares a new database: it applies migrations, creates tables.
type Setup func(ctx context.Context, dsn string) error

// MigratedPoolConns is the size of the pool Migrated opens.
const MigratedPoolConns = 20

// Migrated creates a database for t (dropped when t ends), runs each setup
// on it in order, and opens a pool on it. It is the one way the suites get
// a migrated database; a failing setup fails t.
func (p *PostgresNode) Migrated(t testing.TB, setup ...Setup) Database {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dsn := p.NewDatabase(t)
	for _, s := range setup {
		if err := s(ctx, dsn); err != nil {
			t.Fatalf("testbed: set up the database: %v", err)
		}
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("testbed: %v", err)
	}
	cfg.MaxConns = MigratedPoolConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("testbed: open a pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return Database{DSN: dsn, Pool: pool}
}

// NewDatabase creates an empty database for one test and returns its DSN.
// The database is dropped when t ends.
func (p *PostgresNode) NewDatabase(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "t_" + hex.EncodeToString(b[:])
	if err := p.exec(ctx, "postgres", "CREATE DATABASE "+name); err != nil {
		t.Fatalf("testbed: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.exec(ctx, "postgres", "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("testbed: drop database %s: %v", name, err)
		}
	})
	return p.dsn(name)
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
