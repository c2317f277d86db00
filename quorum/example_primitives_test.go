package quorum_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/quorum"
)

// At most 8 calls to a payment provider at once, across every instance:
// each call holds one permit, a lease with its own fence.
func ExampleLocker_Semaphore() {
	l, err := quorum.New(nodes(), quorum.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	sem, err := l.Semaphore("payments:provider", 8)
	if err != nil {
		log.Fatal(err) // a bad name or count
	}
	err = sem.Do(context.Background(), func(ctx context.Context, permit lease.Lease) error {
		fmt.Println("calling the provider under", permit.Key(), "fence", permit.Fence())
		return nil
	})
	switch {
	case errors.Is(err, lease.ErrNotAcquired):
		log.Print("all 8 permits stayed busy for the whole wait")
	case errors.Is(err, lease.ErrPermitsMismatch):
		log.Print("another instance uses this name with another count")
	case err != nil:
		log.Print(err)
	}
}

// Many readers or one writer; a waiting writer stops new readers.
func ExampleLocker_RWLock() {
	l, err := quorum.New(nodes(), quorum.WithTTL(10*time.Second), quorum.WithMaxReaders(32))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	rw, err := l.RWLock("report:daily")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	_ = rw.RDo(ctx, func(ctx context.Context, _ lease.Lease) error {
		fmt.Println("reading the report beside other readers")
		return nil
	})
	_ = rw.Do(ctx, func(ctx context.Context, w lease.Lease) error {
		fmt.Println("rewriting the report alone, fence", w.Fence())
		return nil
	})
}
