// Package storetest gives a test a migrated orders database on the test
// bed's Postgres, with a Store on it. It is the one set-up of the store,
// payment, events, watchdog and orders suites; it imports the test bed, so
// it lives under devtools/, which no production package may import.
package storetest

import (
	"context"
	"testing"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/orders/store"
)

// Env is a fresh migrated database and a Store on its pool.
type Env struct {
	testbed.Database
	Store *store.Store
}

// Migrate is the testbed.Setup of the orders schema (store.MigrateDSN).
func Migrate(ctx context.Context, dsn string) error {
	_, err := store.MigrateDSN(ctx, dsn)
	return err
}

// New migrates a fresh database on pg for t and opens a Store on it. The
// database holds no products: seed them with Store.SeedProduct.
func New(t testing.TB, pg *testbed.PostgresNode) Env {
	t.Helper()
	db := bedtest.Migrated(t, pg, Migrate)
	st, err := store.New(db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	return Env{Database: db, Store: st}
}
