package testbed_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// toxiproxy v2.5.0: when a proxy stops while a chunk is in flight,
		// its link's writer ends on the closed connection and leaves the
		// no-op stage blocked on its send (link.go write, noop.go Pipe); it
		// holds nothing of the bed's.
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2/toxics.(*NoopToxic).Pipe"),
		// go-redis and pgx close their pools asynchronously.
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper"),
	)
}

// quick is a client whose calls fail fast, to observe faults.
func quick(addr string) *redis.Client {
	o := testbed.ClientOptions(addr)
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond
	return redis.NewClient(o)
}

// connected returns a quick client with an open connection to addr, after
// a normal client has seen the node answer. A first call on a new
// connection can take longer than quick's timeouts on a loaded machine, so
// the quick client's first ping is retried, a bounded number of times.
func connected(t *testing.T, ctx context.Context, addr string) *redis.Client {
	t.Helper()
	n := redis.NewClient(testbed.ClientOptions(addr))
	err := n.Ping(ctx).Err()
	_ = n.Close()
	if err != nil {
		t.Fatalf("ping %s: %v", addr, err)
	}
	c := quick(addr)
	for try := 1; ; try++ {
		err := c.Ping(ctx).Err()
		if err == nil {
			return c
		}
		if try == 10 || ctx.Err() != nil {
			_ = c.Close()
			t.Fatalf("ping %s with a quick client: %v", addr, err)
		}
	}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestBed runs every fault against one bed of five masters and Postgres,
// with the provider that QUORUMLOCK_TESTBED names (auto by default).
func TestBed(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Redis: 5, Postgres: true})
	t.Logf("provider: %s, redis: %v, postgres: %s", bed.Provider, bed.RedisAddrs(), bed.Postgres.Addr())
	if want := os.Getenv(testbed.EnvProvider); want != "" && want != testbed.ProviderAuto && bed.Provider != want {
		t.Fatalf("asked for provider %s, got %s", want, bed.Provider)
	}
	clients := bedtest.RedisClients(t, bed)
	if len(clients) != 5 || len(bed.Redis) != 5 {
		t.Fatalf("want 5 nodes, got %d clients and %d nodes", len(clients), len(bed.Redis))
	}

	t.Run("MastersAreIndependent", func(t *testing.T) {
		ctx := ctxT(t, 10*time.Second)
		for i, c := range clients {
			key := fmt.Sprintf("indep:%d", i)
			if err := c.Set(ctx, key, "v", time.Minute).Err(); err != nil {
				t.Fatalf("node %d: set: %v", i, err)
			}
			for j, o := range clients {
				n, err := o.Exists(ctx, key).Result()
				if err != nil {
					t.Fatalf("node %d: exists: %v", j, err)
				}
				if want := int64(0); j == i {
					want = 1
					if n != want {
						t.Fatalf("node %d lost its own key", i)
					}
				} else if n != want {
					t.Fatalf("key written on node %d is visible on node %d: the masters are not independent", i, j)
				}
			}
			role, err := c.Do(ctx, "ROLE").Slice()
			if err != nil || len(role) == 0 || role[0] != "master" {
				t.Fatalf("node %d: ROLE = %v, %v; want master", i, role, err)
			}
		}
	})

	t.Run("PauseAndResume", func(t *testing.T) {
		ctx := ctxT(t, 30*time.Second)
		n := bed.Redis[1]
		c := connected(t, ctx, n.Addr())
		defer c.Close()
		if err := n.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		err := c.Ping(ctx).Err()
		if resumeErr := n.Resume(ctx); resumeErr != nil {
			t.Fatal(resumeErr)
		}
		if !isTimeout(err) {
			t.Fatalf("ping to a paused node: got %v, want a timeout", err)
		}
		if err := eventually(ctx, func() error { return c.Ping(ctx).Err() }); err != nil {
			t.Fatalf("ping after resume: %v", err)
		}
		// The other nodes never stopped answering.
		for i, o := range clients {
			if err := o.Ping(ctx).Err(); err != nil {
				t.Fatalf("node %d: %v", i, err)
			}
		}
	})

	t.Run("KillRestart", func(t *testing.T) {
		for _, keep := range []bool{false, true} {
			t.Run(fmt.Sprintf("keepData=%v", keep), func(t *testing.T) {
				ctx := ctxT(t, 60*time.Second)
				n := bed.Redis[2]
				c := redis.NewClient(testbed.ClientOptions(n.Addr()))
				defer c.Close()
				q := quick(n.Addr())
				defer q.Close()
				addr := n.Addr()
				if err := c.Set(ctx, "durable", "yes", 0).Err(); err != nil {
					t.Fatal(err)
				}
				if err := n.Kill(ctx); err != nil {
					t.Fatal(err)
				}
				if err := q.Get(ctx, "durable").Err(); err == nil {
					t.Fatal("a killed node still answers")
				}
				if err := n.Restart(ctx, keep); err != nil {
					t.Fatal(err)
				}
				if n.Addr() != addr {
					t.Fatalf("address changed across restart: %s -> %s", addr, n.Addr())
				}
				var got string
				err := eventually(ctx, func() error {
					v, err := c.Get(ctx, "durable").Result()
					if errors.Is(err, redis.Nil) {
						got = ""
						return nil
					}
					got = v
					return err
				})
				if err != nil {
					t.Fatalf("get after restart: %v", err)
				}
				if keep && got != "yes" {
					t.Fatalf("restart with data: key lost (got %q)", got)
				}
				if !keep && got != "" {
					t.Fatalf("restart without data: key survived (got %q)", got)
				}
			})
		}
	})

	t.Run("PartitionAndHeal", func(t *testing.T) {
		ctx := ctxT(t, 30*time.Second)
		n := bed.Redis[3]
		c := connected(t, ctx, n.Addr())
		defer c.Close()
		if err := n.Partition(ctx); err != nil {
			t.Fatal(err)
		}
		errOld := c.Ping(ctx).Err() // an open connection
		fresh := quick(n.Addr())    // a new connection
		errNew := fresh.Ping(ctx).Err()
		_ = fresh.Close()
		for i, o := range clients {
			if i == 3 {
				continue
			}
			if err := o.Ping(ctx).Err(); err != nil {
				t.Errorf("node %d did not answer during the partition of node 3: %v", i, err)
			}
		}
		if err := n.Heal(ctx); err != nil {
			t.Fatal(err)
		}
		if !isTimeout(errOld) || !isTimeout(errNew) {
			t.Fatalf("partitioned node: old conn %v, new conn %v; want timeouts", errOld, errNew)
		}
		if err := eventually(ctx, func() error { return c.Ping(ctx).Err() }); err != nil {
			t.Fatalf("after heal: %v", err)
		}
	})

	t.Run("AddLatency", func(t *testing.T) {
		ctx := ctxT(t, 30*time.Second)
		n := bed.Redis[4]
		c := redis.NewClient(testbed.ClientOptions(n.Addr()))
		defer c.Close()
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		const d = 120 * time.Millisecond
		if err := n.AddLatency(ctx, d); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			start := time.Now()
			if err := c.Ping(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if got := time.Since(start); got < d {
				t.Fatalf("round trip %v with %v of latency added", got, d)
			}
		}
		if err := n.AddLatency(ctx, 0); err != nil {
			t.Fatal(err)
		}
		// The best of a few round trips, so that one slow answer on a
		// loaded machine does not count as latency left in place.
		best := time.Duration(-1)
		for i := 0; i < 5; i++ {
			start := time.Now()
			if err := c.Ping(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if got := time.Since(start); best < 0 || got < best {
				best = got
			}
		}
		if best >= d {
			t.Fatalf("round trip %v (best of 5) after the latency was removed", best)
		}
	})

	t.Run("NodeTime", func(t *testing.T) {
		ctx := ctxT(t, 10*time.Second)
		nt, err := bed.Redis[0].Time(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(nt); d > time.Minute || d < -time.Minute {
			t.Fatalf("node clock is %v away from ours", d)
		}
	})

	t.Run("PostgresCreatesTable", func(t *testing.T) {
		ctx := ctxT(t, 30*time.Second)
		for _, dsn := range []string{bed.Postgres.DSN(), bedtest.NewDatabase(t, bed.Postgres)} {
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Fatalf("connect %s: %v", dsn, err)
			}
			_, err = conn.Exec(ctx, "CREATE TABLE bed_probe (id int PRIMARY KEY, v text); INSERT INTO bed_probe VALUES (1, 'ok')")
			if err != nil {
				t.Fatal(err)
			}
			var v string
			if err := conn.QueryRow(ctx, "SELECT v FROM bed_probe WHERE id = 1").Scan(&v); err != nil || v != "ok" {
				t.Fatalf("select: %q, %v", v, err)
			}
			_ = conn.Close(ctx)
		}
		bad := strings.Replace(bed.Postgres.DSN(), ":"+testbed.PostgresPassword+"@", ":wrong@", 1)
		if conn, err := pgx.Connect(ctx, bad); err == nil {
			_ = conn.Close(ctx)
			t.Fatal("Postgres accepted a wrong password")
		}
	})

	t.Run("Migrated", func(t *testing.T) {
		ctx := ctxT(t, 30*time.Second)
		var order []string
		step := func(name, sql string) testbed.Setup {
			return func(ctx context.Context, dsn string) error {
				order = append(order, name)
				conn, err := pgx.Connect(ctx, dsn)
				if err != nil {
					return err
				}
				defer func() { _ = conn.Close(ctx) }()
				_, err = conn.Exec(ctx, sql)
				return err
			}
		}
		db := bedtest.Migrated(t, bed.Postgres,
			step("create", "CREATE TABLE migrated_probe (id int PRIMARY KEY)"),
			step("fill", "INSERT INTO migrated_probe VALUES (7)"))
		if strings.Join(order, ",") != "create,fill" {
			t.Fatalf("setups ran as %v", order)
		}
		var id int
		if err := db.Pool.QueryRow(ctx, "SELECT id FROM migrated_probe").Scan(&id); err != nil || id != 7 {
			t.Fatalf("the pool does not see the set-up database: %d, %v", id, err)
		}
		if n := db.Pool.Config().MaxConns; n != testbed.MigratedPoolConns {
			t.Fatalf("pool of %d connections", n)
		}
		// Each call is a database of its own.
		other := bedtest.Migrated(t, bed.Postgres)
		var exists bool
		if err := other.Pool.QueryRow(ctx, "SELECT to_regclass('migrated_probe') IS NOT NULL").Scan(&exists); err != nil || exists {
			t.Fatalf("a second database sees the first one's table: %v, %v", exists, err)
		}
	})
}

func TestOptionsAreChecked(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	for _, o := range []testbed.Options{
		{},
		{Redis: -1},
		{Redis: 1, Provider: "kubernetes"},
		{Redis: 1, AppendFsync: "sometimes"},
	} {
		if b, err := testbed.New(ctx, o); err == nil {
			_ = b.Close()
			t.Errorf("New(%+v) accepted bad options", o)
		}
	}
}

func isTimeout(err error) bool {
	if err == nil {
		return false
	}
	var ne interface{ Timeout() bool }
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() ||
		strings.Contains(err.Error(), "i/o timeout")
}

// eventually retries f every 50ms until it succeeds or ctx ends.
func eventually(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}
