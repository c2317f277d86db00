package testbed_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
)

// etcdClockOffset is how far the member's wall clock is from ours: the
// Date header of its HTTP answer (Go's net/http takes it from time.Now)
// against the middle of our request. It is precise to about a second.
func etcdClockOffset(ctx context.Context, n *testbed.EtcdNode) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.DirectAddr()+"/version", nil)
	if err != nil {
		return 0, err
	}
	before := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	mid := before.Add(time.Since(before) / 2)
	date, err := http.ParseTime(resp.Header.Get("Date"))
	if err != nil {
		return 0, fmt.Errorf("Date %q: %w", resp.Header.Get("Date"), err)
	}
	return date.Sub(mid), nil
}

// TestEtcdClock checks what the clock faults do to etcd, on one member (a
// cluster of one is always its own leader, so every lease decision is its
// own): SetClockOffset moves its wall clock; a wall jump alone or a
// monotonic jump alone past a lease's expiry revokes nothing, though the
// monotonic jump shortens the lease's time to live; both together revoke
// it at once. The offsets stay across a restart.
func TestEtcdClock(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Etcd: 1, Clock: true})
	n := bed.Etcd[0]
	ctx := ctxT(t, 3*time.Minute)
	cli := etcdClient(t, n.Addr())
	clockIs := func(d time.Duration) {
		t.Helper()
		err := eventually(ctx, func() error {
			off, err := etcdClockOffset(ctx, n)
			if err == nil && (off < d-10*time.Second || off > d+10*time.Second) {
				err = fmt.Errorf("clock is %v off, want %v", off, d)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	clockIs(0)
	// The lease lasts long enough for the test to run on a slow machine
	// before it expires by the real clocks.
	lease, err := cli.Grant(ctx, 120)
	if err != nil {
		t.Fatal(err)
	}
	etcdPut(t, ctx, cli, "clock/warm", "up")
	if _, err := cli.Put(ctx, "clock/a", "mine", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	if err := n.SetClockOffset(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	clockIs(time.Hour)
	stays(t, ctx, cli, "clock/a", lease.ID, 100, "a wall jump of 1h past the 120s lease")
	if err := n.SetClockOffset(ctx, 0); err != nil {
		t.Fatal(err)
	}
	clockIs(0)
	if err := n.AdvanceMonotonic(ctx, 80*time.Second); err != nil {
		t.Fatal(err)
	}
	ttl := leaseTTL(t, ctx, cli, lease.ID)
	if ttl > 41 || ttl < 0 {
		t.Fatalf("TTL of the 120s lease after a monotonic jump of 80s: %ds, want at most 40s", ttl)
	}
	if err := n.AdvanceMonotonic(ctx, 80*time.Second); err != nil {
		t.Fatal(err)
	}
	stays(t, ctx, cli, "clock/a", lease.ID, -1000, "a monotonic jump of 160s past the 120s lease")
	if err := n.SetClockOffset(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	wantEtcd(t, ctx, cli, "clock/a", "", false) // both clocks past: revoked
	testEtcdClockRestart(t, ctx, n, cli)
}

// testEtcdClockRestart checks that a restarted member keeps its clock's
// offsets, and leases granted since the jumps last their time.
func testEtcdClockRestart(t *testing.T, ctx context.Context, n *testbed.EtcdNode, cli *clientv3.Client) {
	if err := n.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	off, err := etcdClockOffset(ctx, n)
	if err != nil || off < 50*time.Minute {
		t.Fatalf("clock after a restart: %v off (%v), want about 1h", off, err)
	}
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if ttl := leaseTTL(t, ctx, cli, lease.ID); ttl < 50 {
		t.Fatalf("a 60s lease granted after the jumps has %ds to live", ttl)
	}
	if err := n.AdvanceMonotonic(ctx, -time.Second); err == nil {
		t.Fatal("AdvanceMonotonic moved the monotonic clock back")
	}
}

func leaseTTL(t *testing.T, ctx context.Context, cli *clientv3.Client, id clientv3.LeaseID) int64 {
	t.Helper()
	resp, err := cli.TimeToLive(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return resp.TTL
}

// stays checks, for 5s (longer than the member's lease expiry loop of
// 500ms and its retry interval of 3s), that the lease's key stays and the
// lease's TTL is at least minTTL.
func stays(t *testing.T, ctx context.Context, cli *clientv3.Client, key string, id clientv3.LeaseID, minTTL int64, after string) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
		if got, err := etcdGet(ctx, cli, key, 5*time.Second, false); err != nil || got == "" {
			t.Fatalf("after %s: %s = %q (%v), want it kept", after, key, got, err)
		}
		if ttl := leaseTTL(t, ctx, cli, id); ttl < minTTL {
			t.Fatalf("after %s: TTL %ds, want at least %ds", after, ttl, minTTL)
		}
		if err := sleepT(ctx, 500*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
}

func sleepT(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
