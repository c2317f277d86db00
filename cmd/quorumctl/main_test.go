package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/integration/testbed"
	"github.com/quorumlock/quorumlock/quorum"
)

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{nil, {"frobnicate"}, {"bed", "-redis", "x"}, {"demo", "-ordersd", "/nonexistent/ordersd"}, {"trust"}, {"trust", "-addrs", " , "}} {
		if err := run(context.Background(), args, io.Discard); err == nil {
			t.Errorf("run(%q) accepted", args)
		}
	}
}

func TestFindOrdersd(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "ordersd")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := findOrdersd(bin)
	if err != nil || got != bin {
		t.Fatalf("findOrdersd(%q) = %q, %v", bin, got, err)
	}
}

func TestInfoField(t *testing.T) {
	info := "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n"
	if v := infoField(info, "redis_version"); v != "7.0.15" {
		t.Fatalf("got %q", v)
	}
	if v := infoField(info, "missing"); v != "?" {
		t.Fatalf("got %q", v)
	}
}

// trust writes each node's current run_id into the restart marker, so the
// guard lets the young nodes vote at once, and fails on a node it cannot
// reach.
func TestTrust(t *testing.T) {
	bed := testbed.Start(t, testbed.Options{Redis: 3})
	ctx := context.Background()
	var out strings.Builder
	if err := run(ctx, []string{"trust", "-addrs", strings.Join(bed.RedisAddrs(), ",")}, &out); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(out.String(), "trusted until its next restart"); got != 3 {
		t.Fatalf("output %q", out.String())
	}
	for _, n := range bed.Redis {
		a := n.Admin()
		id := infoField(a.Info(ctx, "server").Val(), "run_id")
		marker := a.Get(ctx, quorum.BootMarkerKey).Val()
		_ = a.Close()
		if id == "?" || marker != id {
			t.Fatalf("%s: marker %q, run_id %q", n.Name(), marker, id)
		}
	}
	l, err := quorum.New(clientsOf(t, bed), quorum.WithTTL(time.Hour)) // a window far above the nodes' uptime
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lease, err := l.TryLock(ctx, "trusted")
	if err != nil {
		t.Fatalf("the vouched nodes did not vote: %v", err)
	}
	_ = lease.Unlock(ctx)
	if err := run(ctx, []string{"trust", "-addrs", "127.0.0.1:1"}, io.Discard); err == nil {
		t.Fatal("trust on a node that does not answer succeeded")
	}
}

func clientsOf(t *testing.T, bed *testbed.Bed) []redis.UniversalClient {
	var out []redis.UniversalClient
	for _, a := range bed.RedisAddrs() {
		c := redis.NewClient(testbed.ClientOptions(a))
		t.Cleanup(func() { _ = c.Close() })
		out = append(out, c)
	}
	return out
}
