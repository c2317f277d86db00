package idem_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/orders/idem"
	"github.com/quorumlock/quorumlock/orders/request"
)

// BenchmarkClaim measures a Claim that creates a record and a Claim that
// replays a SUCCESS record, each one script run on one node. The bed runs
// Redis with appendfsync always, so a write waits for an fsync.
func BenchmarkClaim(b *testing.B) {
	bed := bedtest.Start(b, testbed.Options{Redis: 1})
	c := bedtest.RedisClients(b, bed)[0]
	s, err := idem.New([]redis.UniversalClient{c})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("created", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			k, _ := idem.NewKey("u1", request.MustKey(fmt.Sprintf("bench-created-%d", i)))
			if r, err := s.Claim(ctx, k, "fp", "A"); err != nil || r.Outcome != idem.Created {
				b.Fatal(r.Outcome, err)
			}
		}
	})
	b.Run("replay", func(b *testing.B) {
		k, _ := idem.NewKey("u1", request.MustKey("bench-replay"))
		if _, err := s.Claim(ctx, k, "fp", "A"); err != nil {
			b.Fatal(err)
		}
		if err := s.Complete(ctx, k, "A", created201()); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if r, err := s.Claim(ctx, k, "fp", "B"); err != nil || r.Outcome != idem.Success {
				b.Fatal(r.Outcome, err)
			}
		}
	})
}
