package testbed_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/devtools/testbed/etcdbed"
)

// etcdClient is a client of the given endpoints alone, closed when t ends.
func etcdClient(t *testing.T, endpoints ...string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(etcdbed.Config(endpoints...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// adminOf is a client of n that bypasses its proxies, closed when t ends.
func adminOf(t *testing.T, n *testbed.EtcdNode) *clientv3.Client {
	t.Helper()
	c, err := etcdbed.Admin(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// clusterClient is etcdbed's client of every member of bed, through the
// proxies, closed when t ends.
func clusterClient(t *testing.T, bed *testbed.Bed) *clientv3.Client {
	t.Helper()
	c, err := etcdbed.Client(bed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// etcdGet reads key with a deadline of d; serializable reads answer from
// the member's own data, without a quorum.
func etcdGet(ctx context.Context, c *clientv3.Client, key string, d time.Duration, serializable bool) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var opts []clientv3.OpOption
	if serializable {
		opts = append(opts, clientv3.WithSerializable())
	}
	resp, err := c.Get(ctx, key, opts...)
	if err != nil {
		return "", err
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}

// etcdPut writes key through c, retrying a bounded number of times while
// the cluster elects a leader.
func etcdPut(t *testing.T, ctx context.Context, c *clientv3.Client, key, value string) {
	t.Helper()
	err := eventually(ctx, func() error {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err := c.Put(pctx, key, value)
		return err
	})
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

// wantEtcd waits until a read of key through c returns value.
func wantEtcd(t *testing.T, ctx context.Context, c *clientv3.Client, key, value string, serializable bool) {
	t.Helper()
	var got string
	err := eventually(ctx, func() error {
		var err error
		if got, err = etcdGet(ctx, c, key, 3*time.Second, serializable); err != nil {
			return err
		}
		if got != value {
			return fmt.Errorf("%s = %q, want %q", key, got, value)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
}

// settled waits until every member serves clients and a majority agrees
// on a leader, and returns the leader.
func settled(t *testing.T, ctx context.Context, bed *testbed.Bed) *testbed.EtcdNode {
	t.Helper()
	for _, n := range bed.Etcd {
		if err := n.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var leader *testbed.EtcdNode
	err := eventually(ctx, func() error {
		var err error
		leader, err = bed.EtcdLeader(ctx)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return leader
}

// others are the members of bed other than n, and their addresses.
func others(bed *testbed.Bed, n *testbed.EtcdNode) ([]*testbed.EtcdNode, []string) {
	var ns []*testbed.EtcdNode
	var addrs []string
	for _, m := range bed.Etcd {
		if m != n {
			ns = append(ns, m)
			addrs = append(addrs, m.Addr())
		}
	}
	return ns, addrs
}

// TestEtcdOptions checks that a cluster of an even or negative size is
// refused before anything starts.
func TestEtcdOptions(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	for _, n := range []int{-1, 2, 4} {
		_, err := testbed.New(ctx, testbed.Options{Etcd: n})
		if err == nil || !strings.Contains(err.Error(), "odd") {
			t.Errorf("Options{Etcd: %d}: %v, want an error that asks for an odd number", n, err)
		}
	}
}

// TestEtcdImageOnlyWhenAsked checks that the docker provider needs the
// etcd image only for a bed with etcd members.
func TestEtcdImageOnlyWhenAsked(t *testing.T) {
	t.Setenv(testbed.EnvEtcdImage, "quorumlock/absent:none")
	bed := bedtest.Start(t, testbed.Options{Redis: 1})
	if bed.Provider != testbed.ProviderDocker {
		return // only the docker provider has images
	}
	ctx := ctxT(t, time.Minute)
	_, err := testbed.New(ctx, testbed.Options{Etcd: 1, Provider: testbed.ProviderDocker})
	if err == nil || !strings.Contains(err.Error(), "quorumlock/absent:none") {
		t.Fatalf("docker bed with etcd and an absent image: %v, want an error naming the image", err)
	}
}

// TestEtcdCluster starts three members on the provider that
// QUORUMLOCK_TESTBED names and runs each fault against them, one after the
// other; each subtest leaves the cluster whole.
func TestEtcdCluster(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Etcd: 3})
	t.Logf("provider: %s, etcd: %v", bed.Provider, bed.EtcdEndpoints())
	if want := os.Getenv(testbed.EnvProvider); want != "" && want != testbed.ProviderAuto && bed.Provider != want {
		t.Fatalf("asked for provider %s, got %s", want, bed.Provider)
	}
	if len(bed.Etcd) != 3 || len(bed.EtcdEndpoints()) != 3 {
		t.Fatalf("want 3 members, got %d", len(bed.Etcd))
	}
	cli := clusterClient(t, bed)
	t.Run("PutGet", func(t *testing.T) { testEtcdPutGet(t, bed, cli) })
	t.Run("ClientAPIs", func(t *testing.T) { testEtcdClientAPIs(t, cli) })
	t.Run("Pause", func(t *testing.T) { testEtcdPause(t, bed) })
	t.Run("KillRestart", func(t *testing.T) { testEtcdKillRestart(t, bed) })
	t.Run("Partition", func(t *testing.T) { testEtcdPartition(t, bed) })
	t.Run("Latency", func(t *testing.T) { testEtcdLatency(t, bed) })
}

// testEtcdPutGet writes through the cluster client and reads the value
// back through every member's own address, and checks the leader helper.
func testEtcdPutGet(t *testing.T, bed *testbed.Bed, cli *clientv3.Client) {
	ctx := ctxT(t, time.Minute)
	leader := settled(t, ctx, bed)
	st, err := leader.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Leader != leader.ID() || st.MemberID != leader.ID() || st.RaftTerm == 0 || st.RaftIndex == 0 {
		t.Fatalf("EtcdLeader = %s (id %x), but it reports %+v", leader.Name(), leader.ID(), st)
	}
	// The gateway's answer, decoded by the core, agrees with the official
	// client's.
	want, err := adminOf(t, leader).Status(ctx, leader.DirectAddr())
	if err != nil {
		t.Fatal(err)
	}
	if st.MemberID != want.Header.MemberId || st.Leader != want.Leader || st.RaftTerm != want.RaftTerm || st.RaftIndex > want.RaftIndex {
		t.Fatalf("Status = %+v, but the etcd client reports member %x, leader %x, term %d, index %d",
			st, want.Header.MemberId, want.Leader, want.RaftTerm, want.RaftIndex)
	}
	if err := leader.SetClockOffset(ctx, time.Minute); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("SetClockOffset without Options.Clock: %v, want ErrUnsupported", err)
	}
	if err := leader.AdvanceMonotonic(ctx, time.Minute); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("AdvanceMonotonic without Options.Clock: %v, want ErrUnsupported", err)
	}
	etcdPut(t, ctx, cli, "hello", "world")
	for _, n := range bed.Etcd {
		if n.ID() == 0 || n.Addr() == n.DirectAddr() {
			t.Fatalf("%s: id %x, addr %s, direct %s", n.Name(), n.ID(), n.Addr(), n.DirectAddr())
		}
		wantEtcd(t, ctx, etcdClient(t, n.Addr()), "hello", "world", false)
	}
}
