// Package bedtest wraps devtools/testbed for tests: each helper fails
// the test (never skips it) when the bed cannot give what was asked, and
// registers the cleanup on t. The testbed package itself does not import
// testing, so commands that start a bed do not link the test framework.
//
// Clients of the bed's etcd members come from devtools/testbed/etcdbed,
// which this package does not import: the many tests that start a bed
// through it compile neither etcd's client nor gRPC.
package bedtest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/devtools/testbed"
)

// Start starts a bed for a test and closes it when t ends. It fails the test
// when no provider can start.
func Start(t testing.TB, opts testbed.Options) *testbed.Bed {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b, err := testbed.New(ctx, opts)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		// The etcd members are killed first: the bed throws their data
		// away, and members stopped one after the other each wait for
		// the peers already gone (7.6 s for three on the docker
		// provider, 0.4 s killed).
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, n := range b.Etcd {
			_ = n.Kill(ctx)
		}
		if err := b.Close(); err != nil {
			t.Errorf("testbed: close: %v", err)
		}
	})
	return b
}

// RedisClients returns one client per Redis node of b, with
// testbed.ClientOptions, closed when t ends.
func RedisClients(t testing.TB, b *testbed.Bed) []*redis.Client {
	t.Helper()
	cs := b.NewRedisClients()
	t.Cleanup(func() {
		for _, c := range cs {
			_ = c.Close()
		}
	})
	return cs
}

// NewDatabase creates an empty database on p for one test and returns its
// DSN. The database is dropped when t ends.
func NewDatabase(t testing.TB, p *testbed.PostgresNode) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn, drop, err := p.CreateDatabase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := drop(ctx); err != nil {
			t.Error(err)
		}
	})
	return dsn
}

// Migrated creates a database on p for t, runs each setup on it in order,
// and opens a pool on it; the pool is closed and the database dropped when
// t ends. It is the one way the suites get a migrated database; a failing
// setup fails t.
func Migrated(t testing.TB, p *testbed.PostgresNode, setup ...testbed.Setup) testbed.Database {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db, err := p.MigratedDatabase(ctx, setup...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := db.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return db
}
