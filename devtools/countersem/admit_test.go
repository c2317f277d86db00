package countersem

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
)

// The admission script on its own, on one real node.
func TestAdmitScript(t *testing.T) {
	c := bedtest.RedisClients(t, bedtest.Start(t, testbed.Options{Redis: 1}))[0]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admit := func(key, token string, limit int, ttl time.Duration) int {
		t.Helper()
		n, err := admitScript.Run(ctx, c, []string{key}, limit, token, ttl.Milliseconds()).Int()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	const key, ttl = "sem", 30 * time.Second
	for i, step := range []struct {
		token string
		want  int
	}{{"a", 1}, {"b", 1}, {"c", 0}, {"a", 1}} { // a again: already in
		if got := admit(key, step.token, 2, ttl); got != step.want {
			t.Fatalf("step %d: %s admitted %d, want %d", i, step.token, got, step.want)
		}
	}
	if pttl := c.PTTL(ctx, key).Val(); pttl <= 0 || pttl > ttl {
		t.Fatalf("the set's PTTL %v, want in (0, %v]", pttl, ttl)
	}
	if err := c.ZRem(ctx, key, "a").Err(); err != nil {
		t.Fatal(err)
	}
	if admit(key, "c", 2, ttl) != 1 {
		t.Fatal("c refused after a left")
	}
	// An expired holder (its score in the past) is removed before the count.
	if err := c.ZAdd(ctx, key, redis.Z{Score: 1, Member: "b"}).Err(); err != nil {
		t.Fatal(err)
	}
	if admit(key, "d", 2, ttl) != 1 {
		t.Fatal("d refused beside an expired holder")
	}
	if got := c.ZRange(ctx, key, 0, -1).Val(); len(got) != 2 || got[0] != "c" || got[1] != "d" {
		t.Fatalf("holders %q, want [c d]", got)
	}
}
