package lease_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/quorumlock/quorumlock/lease"
)

// restock works on either backend: l is a *quorum.Locker or an
// *etcdlock.Locker, and restock knows neither.
func restock(ctx context.Context, l lease.Locker, product string, write func(ctx context.Context, fence int64) error) error {
	err := l.Do(ctx, "stock:"+product, func(ctx context.Context, le lease.Lease) error {
		slog.InfoContext(ctx, "restocking", "key", le.Key(), "token", lease.TokenDigest(le.Token()))
		// ctx is cancelled, with a cause matching lease.ErrLeaseLost, if
		// the lease is lost; the fence makes a late write harmless anyway.
		return write(ctx, le.Fence())
	})
	switch {
	case errors.Is(err, lease.ErrNotAcquired):
		return fmt.Errorf("another restock runs: %w", err)
	case errors.Is(err, lease.ErrQuorumUnavailable):
		return fmt.Errorf("the lock service cannot decide; try later: %w", err)
	}
	return err
}

// A consumer of the lease API takes a lease.Locker, whichever backend
// made it, and tells outcomes apart with the sentinels.
func Example() {
	var l lease.Locker // quorum.New(nodes, ...) or etcdlock.New(cli, ...)
	if l == nil {
		return // no servers in this example
	}
	_ = restock(context.Background(), l, "42", func(context.Context, int64) error { return nil })
}

// TokenDigest names a lease in a log without the token, which would let
// its reader release the lease.
func ExampleTokenDigest() {
	fmt.Println(lease.TokenDigest("a-secret-token-of-128-random-bits"))
	// Output: 992f415f
}

// An Observer embeds NopObserver and implements only what it needs.
func ExampleNopObserver() {
	var o lease.Observer = lostCounter{}
	o.ObserveLost(lease.LostEvent{Key: "stock:42", Reason: lease.LostExpired})
	o.ObserveAcquire(lease.AcquireEvent{Key: "stock:42", Result: lease.ResultAcquired}) // ignored
	// Output: lost stock:42: expired
}

type lostCounter struct{ lease.NopObserver }

func (lostCounter) ObserveLost(e lease.LostEvent) { fmt.Printf("lost %s: %v\n", e.Key, e.Reason) }
