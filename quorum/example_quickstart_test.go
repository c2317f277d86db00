package quorum_test

import (
	"context"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/quorum"
)

// quickstart is the README's Quickstart example, line for line
// (scripts/readme_test.sh checks that the two agree): lock a key on a
// majority of the masters, write under the lease's fence, release.
func quickstart(ctx context.Context, nodes []redis.UniversalClient, write func(context.Context, int64) error) error {
	l, err := quorum.New(nodes, quorum.WithTTL(10*time.Second)) // nodes: 5 independent Redis masters
	if err != nil {
		return err
	}
	defer l.Close()
	lease, err := l.Lock(ctx, "stock:42") // waits its turn; errors.Is(err, lease.ErrNotAcquired) when busy
	if err != nil {
		return err
	}
	defer lease.Unlock(context.WithoutCancel(ctx)) // the key expires by its TTL anyway
	return write(ctx, lease.Fence())               // the resource refuses a fence older than one it saw
}

// The Quickstart's embedding: one function that holds stock:42 while it
// writes. Each client ends its requests at the context's deadline and never
// retries behind the lock's back.
func Example_quickstart() {
	var masters []redis.UniversalClient
	for _, addr := range []string{"redis1:6379", "redis2:6379", "redis3:6379", "redis4:6379", "redis5:6379"} {
		masters = append(masters, redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1}))
	}
	err := quickstart(context.Background(), masters, func(ctx context.Context, fence int64) error {
		return nil // UPDATE ... WHERE last_fence < fence: package fencing
	})
	if err != nil {
		log.Print(err)
	}
}
