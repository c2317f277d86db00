package quorum_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/quorum"
)

// A candidate leads until it resigns or loses its lease, and fences every
// write with its term: a resource that refuses terms below the last it saw
// refuses a deposed leader's late writes.
func ExampleLocker_Election() {
	// The terms come from the Fencer: a durable one (fencing.Issuer) in production.
	l, err := quorum.New(nodes(), quorum.WithFencer(&counterFencer{last: map[string]int64{}}))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	e, err := l.Election("scheduler")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	lead, err := e.Campaign(ctx, "host-a:8080") // waits for the leadership
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := e.Resign(context.WithoutCancel(ctx)); err != nil && !errors.Is(err, lease.ErrNotLeader) {
			log.Printf("resign: %v", err) // the lease expires by its TTL anyway
		}
	}()
	s := &stock{available: 10}
	select {
	case <-lead.Lost():
		log.Printf("no longer the leader: %v", lead.Err())
		return
	default:
	}
	if err := s.take(lead.Fence(), 1); err != nil {
		log.Printf("refused: %v", err) // a leader with a greater term has written
		return
	}
	// Any candidate (or follower) reads the leader the nodes publish.
	if ld, err := e.Leader(ctx); err == nil {
		fmt.Println("leader", ld.Value, "term", ld.Term)
	}
}
