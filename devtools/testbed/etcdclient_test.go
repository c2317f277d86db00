package testbed_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// testEtcdClientAPIs runs the client APIs a lock needs (KV and
// transactions, leases, watches, sessions and mutexes) with the module's
// etcd client against the bed's etcd server, to show that they work
// together across their versions.
func testEtcdClientAPIs(t *testing.T, cli *clientv3.Client) {
	ctx := ctxT(t, time.Minute)
	etcdPut(t, ctx, cli, "api/k", "v1")
	txn, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Value("api/k"), "=", "v1")).
		Then(clientv3.OpPut("api/k", "v2")).Commit()
	if err != nil || !txn.Succeeded {
		t.Fatalf("txn: %v, succeeded %v", err, txn != nil && txn.Succeeded)
	}
	wantEtcd(t, ctx, cli, "api/k", "v2", false)

	lease, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "api/leased", "x", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.KeepAliveOnce(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}
	ttl, err := cli.TimeToLive(ctx, lease.ID, clientv3.WithAttachedKeys())
	if err != nil || ttl.TTL <= 0 || len(ttl.Keys) != 1 || string(ttl.Keys[0]) != "api/leased" {
		t.Fatalf("time to live: %+v, %v", ttl, err)
	}
	if _, err := cli.Revoke(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}
	wantEtcd(t, ctx, cli, "api/leased", "", false)

	testEtcdWatch(t, ctx, cli)
	testEtcdMutex(t, ctx, cli)
}

// testEtcdWatch watches a key from the revision of a first put, so that
// neither that put nor the next one can be missed, and waits for both.
func testEtcdWatch(t *testing.T, ctx context.Context, cli *clientv3.Client) {
	first, err := cli.Put(ctx, "api/w", "first")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	w := cli.Watch(wctx, "api/w", clientv3.WithRev(first.Header.Revision))
	if _, err := cli.Put(ctx, "api/w", "second"); err != nil {
		t.Fatal(err)
	}
	var seen []string
	for len(seen) < 2 {
		select {
		case resp, ok := <-w:
			if !ok {
				t.Fatalf("watch closed after %v: %v", seen, ctx.Err())
			}
			if err := resp.Err(); err != nil {
				t.Fatal(err)
			}
			for _, ev := range resp.Events {
				seen = append(seen, string(ev.Kv.Value))
			}
		case <-ctx.Done():
			t.Fatalf("watch: saw %v, then nothing", seen)
		}
	}
	if seen[0] != "first" || seen[1] != "second" {
		t.Fatalf("watch saw %v, want [first second]", seen)
	}
}

func testEtcdMutex(t *testing.T, ctx context.Context, cli *clientv3.Client) {
	s1, err := concurrency.NewSession(cli, concurrency.WithTTL(10), concurrency.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	s2, err := concurrency.NewSession(cli, concurrency.WithTTL(10), concurrency.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	m1, m2 := concurrency.NewMutex(s1, "api/lock"), concurrency.NewMutex(s2, "api/lock")
	if err := m1.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m2.TryLock(ctx); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("TryLock while held: %v, want ErrLocked", err)
	}
	if err := m1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := m2.Lock(lctx); err != nil {
		t.Fatal(err)
	}
	if err := m2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
