package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/integration/testbed"
	"github.com/quorumlock/quorumlock/quorum"
)

func TestParseRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-rounds", "0"}, {"-ops", "0"}, {"-workers", "0"}, {"-workers", "20", "-ops", "10"},
		{"-nodes", "0"}, {"-ttl", "1ms"}, {"-bogus"},
	} {
		if _, err := parse(args); err == nil {
			t.Errorf("parse(%q) accepted", args)
		}
	}
	c, err := parse([]string{"-addrs", "127.0.0.1:1,127.0.0.1:2", "-only", "redsync"})
	if err != nil || len(c.addrs) != 2 || len(c.only) != 1 {
		t.Fatalf("parse: %+v %v", c, err)
	}
}

// TestSingleNodeScript runs the baseline's compare-and-delete script on its
// own against a real server: it deletes only the caller's token.
func TestSingleNodeScript(t *testing.T) {
	bed := testbed.Start(t, testbed.Options{Redis: 1})
	c := bed.RedisClients(t)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := newSingleNode(c, time.Minute)
	if err := s.pair(ctx, "k"); err != nil {
		t.Fatalf("lock+unlock: %v", err)
	}
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("key left after unlock: %d %v", n, err)
	}
	if err := c.Set(ctx, "k", "someone-else", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.pair(ctx, "k"); !errors.Is(err, errHeld) {
		t.Fatalf("held key: got %v, want errHeld", err)
	}
	n, err := s.unlock.Run(ctx, c, []string{"k"}, "not-the-owner").Int()
	if err != nil || n != 0 {
		t.Fatalf("foreign unlock: %d %v", n, err)
	}
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "someone-else" {
		t.Fatalf("foreign unlock deleted the owner's key: %q %v", v, err)
	}
	if _, err := s.unlock.Run(ctx, c, []string{"absent"}, "x").Int(); err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
}

// TestRunSideBySide runs every contender once on a small bed and checks
// the report names each of them with no errors. The bed fsyncs every
// second and the TTL and node timeout are generous, so that every
// contender's per-node timeouts (a fraction of the TTL for redsync) hold
// on a loaded machine: any error in the report is a real one.
func TestRunSideBySide(t *testing.T) {
	bed := testbed.Start(t, testbed.Options{Redis: 3, AppendFsync: testbed.FsyncEverySec})
	ctx := context.Background()
	for _, n := range bed.Redis {
		a := n.Admin()
		err := quorum.TrustNode(ctx, a)
		_ = a.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	err := run(ctx, []string{"-addrs", strings.Join(bed.RedisAddrs(), ","), "-rounds", "1", "-ops", "20", "-workers", "2",
		"-ttl", "20s", "-node-timeout", "2s"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"| quorumlock |", "| quorumlock-noguard |", "| redsync |", "| single-node |"} {
		line := ""
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.HasPrefix(l, name) {
				line = l
			}
		}
		if line == "" || !strings.Contains(line, "| 0 |") {
			t.Fatalf("contender %s missing or with errors in:\n%s", name, out.String())
		}
	}
}
