package quorum_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/quorum"
)

// nodes returns one client per independent Redis master. ContextTimeoutEnabled
// lets each request end at the node timeout; MaxRetries -1 keeps the client
// from retrying a request behind the locker's back.
func nodes() []redis.UniversalClient {
	var out []redis.UniversalClient
	for _, addr := range []string{"redis1:6379", "redis2:6379", "redis3:6379", "redis4:6379", "redis5:6379"} {
		out = append(out, redis.NewClient(&redis.Options{
			Addr:                  addr,
			ContextTimeoutEnabled: true,
			MaxRetries:            -1,
		}))
	}
	return out
}

// Lock, work before Until, Unlock.
func Example() {
	l, err := quorum.New(nodes(), quorum.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	le, err := l.Lock(ctx, "stock:42")
	switch {
	case errors.Is(err, lease.ErrNotAcquired):
		log.Print("busy: someone else holds stock:42")
		return
	case err != nil:
		log.Printf("lock unavailable: %v", err) // a *quorum.QuorumError names each failed node
		return
	}
	defer func() {
		if err := le.Unlock(context.WithoutCancel(ctx)); err != nil {
			log.Printf("unlock: %v", err) // the key expires by its TTL anyway
		}
	}()
	if time.Now().Before(le.Until()) {
		fmt.Println("working on stock:42 as", le.Token())
	}
}

// Do holds the lease while fn runs, extends it in the background and
// cancels fn's context the moment it is lost.
func ExampleLocker_Do() {
	l, err := quorum.New(nodes(), quorum.WithTTL(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	err = l.Do(context.Background(), "report:daily", func(ctx context.Context, le lease.Lease) error {
		for step := range 100 {
			select {
			case <-ctx.Done():
				return context.Cause(ctx) // matches lease.ErrLeaseLost when the lease was lost
			default:
			}
			fmt.Println("step", step)
		}
		return nil
	})
	if errors.Is(err, lease.ErrLeaseLost) {
		log.Print("lost the lease part way: the work may have overlapped with another holder")
	}
}

// counterFencer is a Fencer for the example; a real one is durable (a row
// in the database that also holds the protected data).
type counterFencer struct {
	mu   sync.Mutex
	last map[string]int64
}

func (f *counterFencer) Next(ctx context.Context, key string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last[key]++
	return f.last[key], nil
}

// stock is the protected resource: it remembers the highest fence it has
// accepted and rejects writes that carry a lower one.
type stock struct {
	mu        sync.Mutex
	available int
	lastFence int64
}

var errStaleFence = errors.New("stale fence: a newer lock holder has written")

func (s *stock) take(fence int64, n int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fence <= s.lastFence {
		return errStaleFence
	}
	s.lastFence = fence
	s.available -= n
	return nil
}

// With a Fencer, every lease carries a fence token, and the resource rejects
// a holder whose lease expired while it was paused.
func ExampleWithFencer() {
	l, err := quorum.New(nodes(), quorum.WithFencer(&counterFencer{last: map[string]int64{}}))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	s := &stock{available: 10}
	err = l.Do(context.Background(), "stock:42", func(ctx context.Context, le lease.Lease) error {
		return s.take(le.Fence(), 1)
	})
	if errors.Is(err, errStaleFence) {
		log.Print("rejected a late write")
	}
}

// A new deployment's masters have just started, so the restart guard keeps
// them out of the vote for one window. An operator who knows they never
// held a lock vouches for each running process; the trust ends by itself at
// the node's next restart.
func ExampleTrustNode() {
	ctx := context.Background()
	for _, c := range nodes() {
		if err := quorum.TrustNode(ctx, c); err != nil {
			log.Fatal(err)
		}
	}
	// With appendonly yes and appendfsync always on every master, a node
	// that restarts with its data may vote at once as well.
	l, err := quorum.New(nodes(), quorum.WithDurableNodes(true))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
}
