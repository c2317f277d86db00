package fencing_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/quorumlock/quorumlock/fencing"
)

// testReserver: a reserved token becomes the key's last one only through
// Take in a transaction that commits; of two holders of one reservation
// at most one takes it, and an Issuer's token makes older reservations
// stale.
func testReserver(t *testing.T, srv pgServer) {
	t.Run("ReserveWritesNothing", func(t *testing.T) {
		t.Parallel()
		pool, _ := newDB(t, srv)
		ctx := ctxT(t)
		res, err := fencing.NewReserver(pool)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if f, err := res.Next(ctx, "k"); err != nil || f != 1 {
				t.Fatalf("Next = %d, %v; want 1 while nothing was taken", f, err)
			}
		}
		if err := take(ctx, pool, "k", 1); err != nil {
			t.Fatal(err)
		}
		if f, _ := res.Next(ctx, "k"); f != 2 {
			t.Fatalf("after Take(1), Next = %d, want 2", f)
		}
	})
	t.Run("OneHolderTakesAReservation", func(t *testing.T) {
		t.Parallel()
		pool, _ := newDB(t, srv)
		ctx := ctxT(t)
		const holders = 8
		errs := make([]error, holders)
		var wg sync.WaitGroup
		for i := range holders {
			wg.Go(func() { errs[i] = take(ctx, pool, "k", 1) })
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, fencing.ErrStaleFence):
				t.Fatal(err)
			}
		}
		if won != 1 {
			t.Fatalf("%d holders took token 1, want exactly 1", won)
		}
	})
	t.Run("AnIssuedTokenMakesReservationsStale", func(t *testing.T) {
		t.Parallel()
		pool, _ := newDB(t, srv)
		ctx := ctxT(t)
		res, _ := fencing.NewReserver(pool)
		iss, _ := fencing.NewIssuer(pool)
		f, _ := res.Next(ctx, "k")
		if _, err := iss.Next(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if err := take(ctx, pool, "k", f); !errors.Is(err, fencing.ErrStaleFence) {
			t.Fatalf("Take after an Issuer token: %v, want ErrStaleFence", err)
		}
	})
	t.Run("ARolledBackTakeTakesNothing", func(t *testing.T) {
		t.Parallel()
		pool, _ := newDB(t, srv)
		ctx := ctxT(t)
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := fencing.Take(ctx, tx, "k", 1); err != nil {
			t.Fatal(err)
		}
		_ = tx.Rollback(ctx)
		if err := take(ctx, pool, "k", 1); err != nil {
			t.Fatalf("the rolled back reservation is still free: %v", err)
		}
	})
	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		pool, _ := newDB(t, srv)
		ctx := ctxT(t)
		if _, err := fencing.NewReserver(nil); !errors.Is(err, fencing.ErrInvalid) {
			t.Fatalf("nil database: %v", err)
		}
		res, _ := fencing.NewReserver(pool)
		if _, err := res.Next(ctx, ""); !errors.Is(err, fencing.ErrInvalid) {
			t.Fatalf("empty key: %v", err)
		}
		if err := fencing.Take(ctx, pool, "k", 0); !errors.Is(err, fencing.ErrInvalid) {
			t.Fatalf("fence 0: %v", err)
		}
		if f, _ := res.Next(ctx, "k"); f != 1 {
			t.Fatalf("bad input took a token: next is %d", f)
		}
	})
}

// take takes fence for key in a transaction of its own.
func take(ctx context.Context, pool interface {
	Begin(context.Context) (pgx.Tx, error)
}, key string, fence int64) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	if err := fencing.Take(ctx, tx, key, fence); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	return tx.Commit(ctx)
}
