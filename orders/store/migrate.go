package store

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrationLockID is the session advisory lock that serializes concurrent
// Migrate calls on one database (the ASCII bytes of "quorumor"). It differs
// from goose's default id, so other goose users of the same database neither
// wait for us nor make us wait.
const migrationLockID int64 = 0x71756f72756d6f72

// Migrations returns the embedded SQL migrations, for tools that want to
// list or inspect them.
func Migrations() fs.FS {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		// The directory is embedded at build time; this cannot fail.
		panic(err)
	}
	return sub
}

// Migrate applies every pending migration to db and returns the schema
// version it reached. Running it again is a no-op, and several processes may
// run it at once: a Postgres advisory lock lets one apply while the others
// wait, then find nothing to do.
func Migrate(ctx context.Context, db *sql.DB) (int64, error) {
	if db == nil {
		return 0, fmt.Errorf("%w: nil database", ErrInvalid)
	}
	locker, err := lock.NewPostgresSessionLocker(
		lock.WithLockID(migrationLockID),
		lock.WithLockTimeout(1, 300),
	)
	if err != nil {
		return 0, fmt.Errorf("store: migrate: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, Migrations(),
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return 0, fmt.Errorf("store: migrate: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return 0, fmt.Errorf("store: migrate: %w", err)
	}
	v, err := p.GetDBVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("store: migrate: read version: %w", err)
	}
	return v, nil
}

// MigrateDSN opens the database at dsn (a postgres:// URL or key=value
// string) with the pgx driver, runs [Migrate] and closes it.
func MigrateDSN(ctx context.Context, dsn string) (int64, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return 0, fmt.Errorf("%w: database URL: %w", ErrInvalid, err)
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	return Migrate(ctx, db)
}
