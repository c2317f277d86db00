package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/quorum"
)

// primBed is a bed of three masters that the lock's restart guard trusts,
// seen by quorumctl (env), by an admin client per master, and by a Locker.
type primBed struct {
	env     map[string]string
	admins  []*redis.Client
	locker  *quorum.Locker
	outputs []result // every quorumctl run, for the token check
}

func newPrimBed(t *testing.T, opts ...quorum.Option) *primBed {
	t.Helper()
	bed := bedtest.Start(t, testbed.Options{Redis: 3})
	b := &primBed{env: map[string]string{"ORDERS_REDIS_ADDRS": strings.Join(bed.RedisAddrs(), ",")}}
	b.admins = bedtest.RedisClients(t, bed)
	nodes := make([]redis.UniversalClient, len(b.admins))
	for i, c := range b.admins {
		if err := quorum.TrustNode(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		nodes[i] = c
	}
	// A node timeout for a loaded machine: the first requests also dial and load the scripts.
	l, err := quorum.New(nodes, append([]quorum.Option{quorum.WithTTL(time.Minute), quorum.WithNodeTimeout(2 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	b.locker = l
	return b
}

// ctl runs quorumctl on the bed.
func (b *primBed) ctl(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	r := ctl(t, b.env, stdin, args...)
	b.outputs = append(b.outputs, r)
	return r
}

// values is key's value on each master, "<absent>" where it has none.
func (b *primBed) values(t *testing.T, key string) []string {
	t.Helper()
	out := make([]string, len(b.admins))
	for i, a := range b.admins {
		v, err := a.Get(context.Background(), key).Result()
		switch {
		case errors.Is(err, redis.Nil):
			v = "<absent>"
		case err != nil:
			t.Fatal(err)
		}
		out[i] = v
	}
	return out
}

// want fails t unless every master holds want ("<absent>": none) at each key.
func (b *primBed) want(t *testing.T, want string, keys ...string) {
	t.Helper()
	for _, k := range keys {
		for i, v := range b.values(t, k) {
			if v != want {
				t.Fatalf("master %d holds %q at %q, want %q", i, v, k, want)
			}
		}
	}
}

// noTokens fails t if any output of the bed holds one of tokens in full.
func (b *primBed) noTokens(t *testing.T, tokens ...string) {
	t.Helper()
	for _, r := range b.outputs {
		for _, tok := range tokens {
			if strings.Contains(r.all(), tok) {
				t.Errorf("quorumctl %q printed a full token:\n%s", r.args, r.all())
			}
		}
	}
}

// The primitives' commands refuse bad usage before they reach a master.
func TestPrimitivesUsageErrors(t *testing.T) {
	env := map[string]string{"ORDERS_REDIS_ADDRS": "127.0.0.1:1"}
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"semaphore"}, "missing NAME"},
		{[]string{"semaphore", ""}, "NAME is empty"},
		{[]string{"semaphore", "a", "b"}, "want one NAME, got 2"},
		{[]string{"semaphore", "s", "--release", "0"}, "missing --token"},
		{[]string{"semaphore", "s", "--release", "x", "--token", "tok-123"}, `invalid argument "x" for "--release"`},
		{[]string{"semaphore", "s", "--release", "-1", "--token", "tok-123"}, "permit -1: an index is 0 or more"},
		{[]string{"semaphore", "s", "--token", "tok-123"}, "--token is for --release"},
		{[]string{"semaphore", "s", "--release", "0", "--token", "-"}, "--token -: read the token from standard input"},
		{[]string{"rwlock"}, "missing NAME"},
		{[]string{"rwlock", "rw", "--release-writer"}, "missing --token"},
		{[]string{"rwlock", "rw", "--release-reader", "0"}, "missing --token"},
		{[]string{"rwlock", "rw", "--release-writer", "--release-reader", "0", "--token", "tok-123"}, "exclude each other"},
		{[]string{"rwlock", "rw", "--token", "tok-123"}, "--token is for --release-writer or --release-reader"},
		{[]string{"rwlock", "rw", "--release-reader", "-2", "--token", "tok-123"}, "permit -2"},
		{[]string{"election"}, "missing NAME"},
		{[]string{"election", "e", "--resign"}, "missing --token"},
		{[]string{"election", "e", "--token", "tok-123"}, "--token is for --resign"},
		{[]string{"election", "e", "-o", "yaml"}, `-o "yaml": want table or json`},
		{[]string{"election", quorum.BootMarkerKey, "--resign", "--token", "tok-123"}, "is the restart marker's key"},
		{[]string{"rwlock", quorum.BootMarkerKey}, "is the restart marker's key"},
	} {
		r := ctl(t, env, "", tc.args...)
		wantCode(t, r, 2, tc.msg)
		if r.stdout != "" {
			t.Errorf("quorumctl %q printed on stdout: %q", tc.args, r.stdout)
		}
	}
	// Unreachable masters: nothing to tell, nothing released.
	wantCode(t, ctl(t, env, "", "semaphore", "s"), 1, "only 0 of 1 masters answered")
	wantCode(t, ctl(t, env, "", "rwlock", "rw"), 1, "only 0 of 1 masters answered")
	wantCode(t, ctl(t, env, "", "election", "e"), 1, "only 0 of 1 masters answered")
	wantCode(t, ctl(t, env, "", "semaphore", "s", "--release", "0", "--token", "tok-123"), 1, "no master answered")
	wantCode(t, ctl(t, env, "", "election", "e", "--resign", "--token", "tok-123"), 1, "nothing released: 1 master(s) did not answer")
}

// The unlock script on its own: compare-and-delete of each lock key, a
// release message for each key it deleted, companions deleted with the
// first key only.
func TestUnlockScript(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Redis: 1})
	c := bedtest.RedisClients(t, bed)[0]
	ctx := context.Background()
	ps := c.Subscribe(ctx, quorum.ReleaseChannelPrefix+"a", quorum.ReleaseChannelPrefix+"b")
	t.Cleanup(func() { _ = ps.Close() })
	if _, err := ps.Receive(ctx); err != nil { // the subscription is in place
		t.Fatal(err)
	}
	for k, v := range map[string]string{"a": "tok", "b": "other", "d": "companion", "e": "companion"} {
		c.Set(ctx, k, v, time.Minute)
	}
	script := redis.NewScript(unlockLua)
	run := func(keys []string, m int) []int64 {
		t.Helper()
		got, err := script.Run(ctx, c, keys, "tok", m).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := run([]string{"b", "a", "c", "e"}, 3); len(got) != 3 || got[0] != 0 || got[1] != 1 || got[2] != -1 {
		t.Fatalf("b (another token's), a (the token's), c (absent): got %v, want [0 1 -1]", got)
	}
	if v := c.Exists(ctx, "a", "b", "e").Val(); v != 2 {
		t.Fatalf("after the release of a alone, %d of a, b and the companion e exist, want b and e", v)
	}
	msg, err := ps.ReceiveMessage(ctx)
	if err != nil || msg.Channel != quorum.ReleaseChannelPrefix+"a" {
		t.Fatalf("release message %v (%v), want one on a's channel", msg, err)
	}
	c.Set(ctx, "a", "tok", time.Minute)
	if got := run([]string{"a", "d"}, 1); len(got) != 1 || got[0] != 1 {
		t.Fatalf("a with the companion d: got %v, want [1]", got)
	}
	if v := c.Exists(ctx, "a", "d", "b").Val(); v != 1 {
		t.Fatalf("after a's release with its companion d, %d of a, d and b exist, want b", v)
	}
}
