package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quorumlock/quorumlock/fencing"
)

// This example issues fencing tokens for a lock key. The quorum locker takes
// the Issuer as its Fencer (quorum.WithFencer(issuer)), so every lease on
// stock:42 carries the next token.
func ExampleIssuer() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	if err := fencing.EnsureSchema(ctx, pool); err != nil {
		fmt.Println(err)
		return
	}
	issuer, err := fencing.NewIssuer(pool)
	if err != nil {
		fmt.Println(err)
		return
	}
	first, _ := issuer.Next(ctx, "stock:42")
	second, _ := issuer.Next(ctx, "stock:42")
	fmt.Println(second > first)
}

// This example takes one unit of stock for product 42 with a fenced write.
// A holder whose lease was superseded gets ErrStaleFence and changes
// nothing; an empty shelf gives ErrConditionFailed.
func ExampleTable_Update() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()

	stock, err := fencing.NewTable("product_stock", "product_id")
	if err != nil {
		fmt.Println(err)
		return
	}
	fence := int64(42) // from the lease: lease.Fence()
	var left int64
	err = stock.Update(ctx, pool, fencing.Update{
		Key:       "42",
		Fence:     fence,
		Set:       []fencing.Assignment{fencing.Sub("available", 1)},
		Where:     []fencing.Condition{fencing.Ge("available", 1)},
		Returning: []string{"available"},
	}, &left)
	var rej *fencing.RejectedError
	switch {
	case err == nil:
		fmt.Println("taken, left:", left)
	case errors.Is(err, fencing.ErrStaleFence) && errors.As(err, &rej):
		fmt.Println("lease superseded; the row has seen fence", rej.Current)
	case errors.Is(err, fencing.ErrConditionFailed):
		fmt.Println("out of stock")
	case errors.Is(err, fencing.ErrNotFound):
		fmt.Println("no such product")
	default:
		fmt.Println("database error:", err)
	}
}

// This example is a fenced read-modify-write: the holder reads the stock,
// computes outside the database, and writes the result back. Claim records
// the holder's fence with the read, so a holder with an older fence can no
// longer write, and a newer holder's claim makes this write fail.
func ExampleTable_Claim() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()

	stock, err := fencing.NewTable("product_stock", "product_id")
	if err != nil {
		fmt.Println(err)
		return
	}
	fence := int64(43) // from the lease: lease.Fence()
	var available int64
	if err := stock.Claim(ctx, pool, "42", fence, []string{"available"}, &available); err != nil {
		fmt.Println("not claimed:", err)
		return
	}
	err = stock.Update(ctx, pool, fencing.Update{
		Key: "42", Fence: fence, Claimed: true,
		Set: []fencing.Assignment{fencing.Set("available", available-1)},
	})
	switch {
	case err == nil:
		fmt.Println("written:", available-1)
	case errors.Is(err, fencing.ErrStaleFence):
		fmt.Println("a newer holder claimed the row; nothing written")
	default:
		fmt.Println("database error:", err)
	}
}
