package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quorumlock/quorumlock/devtools/storetest"
	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/orders/events"
	"github.com/quorumlock/quorumlock/orders/store"
)

// A commit whose wait for the synchronous standby was ended without it
// (its backend terminated, as when a primary that lost its standby is
// stopped) is visible on the primary alone, and a failover to the standby
// loses it. Nothing may answer with it or act on it: Lookup, a retry of
// the same order and the outbox relay all wait for the standby, and give
// up when their context ends, until the commit is durable (here: until
// replication stops being synchronous). Before they waited, Lookup
// answered the order, the retry replayed it and the relay published its
// event: the lost 201s and the orphaned events of the failover runs.
func TestNothingAnswersACommitTheStandbyLacks(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Postgres: true, Redis: 1})
	db := storetest.New(t, bed.Postgres)
	ctx := context.Background()
	if err := db.Store.SeedProduct(ctx, "42", 10, 100); err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	setStandbys(t, admin, "ghost") // a synchronous standby that never answers (the bed is this test's own)
	cart := store.Cart{Order: batchOrder("u1", "k1", 1), Snapshot: snapshotOf,
		Lines: []store.CartLine{{ProductID: "42", Quantity: 1, FenceKey: "stock:42"}}}
	if _, err := placeWithin(db.Store, cart, time.Second); err == nil {
		t.Fatal("a commit returned without its synchronous standby")
	}
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'`); err != nil {
		t.Fatal(err)
	}
	waitVisible(t, admin, cart.Order.OrderID) // committed on this server alone
	lctx, cancel := context.WithTimeout(ctx, time.Second)
	out, err := db.Store.Lookup(lctx, "u1", cart.Order.IdempotencyKey)
	cancel()
	if err == nil {
		t.Errorf("Lookup answered %s %s before the standby had it", out.Kind, out.Order.ID)
	}
	if res, err := placeWithin(db.Store, cart, time.Second); err == nil {
		t.Errorf("the retry replayed %v before the standby had it", res[0].Outcome.Order.ID)
	}
	rdb := bed.Redis[0].Admin()
	defer rdb.Close()
	relay, err := events.NewRelay(db.Pool, rdb)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	published, err := relay.PublishOnce(rctx)
	cancel()
	if inStream, _ := rdb.XLen(ctx, events.DefaultStream).Result(); inStream > 0 || err == nil {
		t.Errorf("the relay published %d events (%d in the stream; %v) before the standby had them", published, inStream, err)
	}
	setStandbys(t, admin, "")
	if out, err := db.Store.Lookup(ctx, "u1", cart.Order.IdempotencyKey); err != nil || out.Order.ID != cart.Order.OrderID {
		t.Fatalf("Lookup without a synchronous standby: %v %v, want the order", out.Order.ID, err)
	}
}

// placeWithin places cart within d.
func placeWithin(st *store.Store, cart store.Cart, d time.Duration) ([]store.CartResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	res, err := st.PlaceCarts(ctx, []store.Cart{cart})
	if err == nil && res[0].Err != nil {
		err = res[0].Err
	}
	return res, err
}

// setStandbys sets synchronous_standby_names and waits until a new
// session sees it.
func setStandbys(t *testing.T, admin *pgx.Conn, names string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := admin.Exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = '"+names+"'"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
	for {
		c, err := pgx.Connect(ctx, admin.Config().ConnString())
		if err != nil {
			t.Fatal(err)
		}
		var got string
		err = c.QueryRow(ctx, "SHOW synchronous_standby_names").Scan(&got)
		_ = c.Close(ctx)
		if err == nil && got == names {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("synchronous_standby_names is %q, want %q", got, names)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitVisible waits until order id is visible to admin.
func waitVisible(t *testing.T, admin *pgx.Conn, id string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		err := admin.QueryRow(context.Background(), "SELECT count(*) FROM orders WHERE order_id = $1", id).Scan(&n)
		if err == nil && n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("order %s not visible after its backend ended (%d, %v)", id, n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
