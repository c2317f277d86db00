package integration_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/etcdbed"
	"github.com/quorumlock/quorumlock/etcdlock"
	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/quorum"
)

// TestProviders is the short row of each provider of the bed. `make test`
// runs every suite once, on the provider QUORUMLOCK_TESTBED chooses (auto:
// docker when the engine answers and the images exist, else local
// processes); this row shows the other one working too. On each provider
// it starts three Redis masters, Postgres and one etcd member, takes and
// releases a fenced quorum lock and an etcd lock, takes the quorum lock
// with one master paused and then with another one killed, restarts that
// one, and tears the bed down.
//
// A provider that cannot start fails its row with the bed's hint, as
// every suite does: CI fails, never skips, when a provider is missing.
// The one exception is a provider that QUORUMLOCK_TESTBED rules out
// (QUORUMLOCK_TESTBED=local on a machine without Docker): its row is
// skipped, and says so.
func TestProviders(t *testing.T) {
	for _, p := range []string{testbed.ProviderDocker, testbed.ProviderLocal} {
		t.Run(p, func(t *testing.T) {
			if want := os.Getenv(testbed.EnvProvider); want != "" && want != testbed.ProviderAuto && want != p {
				t.Skipf("%s=%s rules the %s provider out", testbed.EnvProvider, want, p)
			}
			providerRow(t, p)
		})
	}
}

// providerRow is TestProviders on provider p.
func providerRow(t *testing.T, p string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	bed, err := testbed.New(ctx, testbed.Options{Redis: 3, Etcd: 1, Postgres: true, Provider: p})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = bed.Close()
		}
	})
	if bed.Provider != p {
		t.Fatalf("asked for the %s provider, got %s", p, bed.Provider)
	}
	t.Logf("%s: bed up in %v", p, time.Since(start).Round(time.Millisecond))
	res, issuer := newResource(t, ctx, bed.Postgres.DSN())
	l := smokeLocker(t, ctx, bed, issuer)

	le := lockOnce(t, ctx, l, "all masters")
	if err := res.write(ctx, le.Fence(), "smoke"); err != nil {
		t.Fatalf("fenced write: %v", err)
	}
	unlock(t, ctx, le)

	if err := bed.Redis[0].Pause(ctx); err != nil {
		t.Fatal(err)
	}
	unlock(t, ctx, lockOnce(t, ctx, l, "master 0 paused"))
	if err := bed.Redis[0].Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if err := bed.Redis[1].Kill(ctx); err != nil {
		t.Fatal(err)
	}
	unlock(t, ctx, lockOnce(t, ctx, l, "master 1 killed"))
	if err := bed.Redis[1].Restart(ctx, true); err != nil {
		t.Fatal(err)
	}
	if err := bed.Redis[1].Admin().Ping(ctx).Err(); err != nil {
		t.Fatalf("master 1 after its restart: %v", err)
	}

	cli, err := etcdbed.Client(bed)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	// A node timeout that a loaded CI machine's etcd writes fit in (the
	// default, TTL/10, is 500 ms).
	el, err := etcdlock.New(cli, etcdlock.WithTTL(5*time.Second), etcdlock.WithNodeTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer el.Close()
	unlock(t, ctx, lockOnce(t, ctx, el, "etcd"))

	// The clients go first: Postgres, told to stop, waits for its
	// sessions to end.
	_ = el.Close()
	_ = cli.Close()
	res.pool.Close()
	took := time.Now()
	closed = true
	if err := bed.Close(); err != nil {
		t.Fatalf("tear down: %v", err)
	}
	t.Logf("%s: torn down in %v; the row took %v", p, time.Since(took).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// smokeLocker is a fenced quorum lock on bed's masters, which it vouches
// for as new (they never held a lock), so the restart guard does not make
// the row wait.
func smokeLocker(t *testing.T, ctx context.Context, bed *testbed.Bed, f lease.Fencer) *quorum.Locker {
	t.Helper()
	for _, n := range bed.Redis {
		c := n.Admin()
		err := quorum.TrustNode(ctx, c)
		_ = c.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	cs := bed.NewRedisClients()
	t.Cleanup(func() {
		for _, c := range cs {
			_ = c.Close()
		}
	})
	l, err := quorum.New(clientsOf(cs), quorum.WithTTL(10*time.Second), quorum.WithNodeTimeout(time.Second),
		quorum.WithMaxWait(10*time.Second), quorum.WithFencer(f))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// locker is what the row needs of quorum's and etcdlock's Lockers.
type locker interface {
	Lock(ctx context.Context, key string) (lease.Lease, error)
}

// lockOnce takes the row's key on l.
func lockOnce(t *testing.T, ctx context.Context, l locker, when string) lease.Lease {
	t.Helper()
	le, err := l.Lock(ctx, "smoke:key")
	if err != nil {
		t.Fatalf("lock (%s): %v", when, err)
	}
	return le
}

func unlock(t *testing.T, ctx context.Context, le lease.Lease) {
	t.Helper()
	if err := le.Unlock(ctx); err != nil {
		t.Fatalf("unlock: %v", err)
	}
}
