package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/orders/store"
)

// NewOnGroup is New on the bed's Postgres HA group g: it creates a fresh
// database on the group's primary (synchronous replication carries it to
// the standby), migrates it and opens a Store on it. The Env's DSN is the
// group's multi-host URI with the database replaced (see WithDatabase), so
// that a client of it reaches whichever node is the primary; the pool is
// open on it with up to testbed.MigratedPoolConns connections. The
// database is dropped when t ends, on the primary of that time.
func NewOnGroup(t testing.TB, g *testbed.PostgresGroup) Env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dsn := newGroupDatabase(ctx, t, g)
	if err := Migrate(ctx, dsn); err != nil {
		t.Fatalf("storetest: migrate the group's database: %v", err)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = testbed.MigratedPoolConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("storetest: open a pool on the group: %v", err)
	}
	t.Cleanup(pool.Close) // before the drop: cleanups run last first
	st, err := store.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	return Env{Database: testbed.Database{DSN: dsn, Pool: pool}, Store: st}
}

// newGroupDatabase creates an empty database through the group's URI (on
// its primary), registers its drop on t, and returns its multi-host URI.
func newGroupDatabase(ctx context.Context, t testing.TB, g *testbed.PostgresGroup) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "t_" + hex.EncodeToString(b[:])
	dsn, err := WithDatabase(g.URI(), name)
	if err != nil {
		t.Fatal(err)
	}
	if err := execOn(ctx, g.URI(), "CREATE DATABASE "+name); err != nil {
		t.Fatalf("storetest: create a database on the group: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := execOn(ctx, g.URI(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("storetest: drop database %s on the group: %v", name, err)
		}
	})
	return dsn
}

// execOn runs sql once on a connection to dsn.
func execOn(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}

// WithDatabase returns the Postgres URI uri with its database replaced by
// db (added when uri names none). It handles multi-host URIs
// (postgres://u:p@h1:p1,h2:p2/db?...), which net/url does not parse; the
// user information must be percent-encoded, as in any URI.
func WithDatabase(uri, db string) (string, error) {
	scheme, rest, ok := strings.Cut(uri, "://")
	if !ok || (scheme != "postgres" && scheme != "postgresql") {
		return "", fmt.Errorf("storetest: %q is not a postgres:// URI", uri)
	}
	query := ""
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		rest, query = rest[:i], rest[i:]
	}
	authority := rest
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		authority = rest[:i]
	}
	return scheme + "://" + authority + "/" + db + query, nil
}
