// Command ordersd serves the idempotent order API on Redis masters and
// Postgres.
//
//	ordersd [serve] [flags]                  serve HTTP (flags and ORDERS_* variables: see -h)
//	ordersd migrate                          run the database migrations and exit
//	ordersd token -user u1001 [-ttl 1h]      print a dev bearer token signed with ORDERS_JWT_SECRET
//	ordersd seed -product 42 -stock 1 [-price 1999]   set a product's stock (for demos and tests)
//
// Endpoints besides the API: /healthz (the process is up), /readyz
// (Postgres answers, and with the stock lock on a majority of the Redis
// masters; a Redis fault that orders survive is "ready (degraded: ...)"),
// /metrics (Prometheus).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quorumlock/quorumlock/orders/auth"
	"github.com/quorumlock/quorumlock/orders/store"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "ordersd:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		cfg, err := parseConfig(args, stderr)
		if err != nil {
			return err
		}
		return serve(ctx, cfg, nil, stderr)
	case "migrate":
		url, err := secret("ORDERS_DATABASE_URL")
		if err != nil {
			return err
		}
		if url == "" {
			return errors.New("ORDERS_DATABASE_URL is empty")
		}
		v, err := store.MigrateDSN(ctx, url)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "database at version %d\n", v)
		return nil
	case "token":
		return token(args, stdout)
	case "seed":
		return seed(ctx, args, stdout)
	}
	return fmt.Errorf("unknown command %q: want serve, migrate, token or seed", cmd)
}

func token(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("ordersd token", flag.ContinueOnError)
	user := fs.String("user", "", "user id (the token's sub)")
	ttl := fs.Duration("ttl", time.Hour, "lifetime")
	if err := fs.Parse(args); err != nil {
		return err
	}
	key, err := secret("ORDERS_JWT_SECRET")
	if err != nil {
		return err
	}
	tok, err := auth.Mint([]byte(key), *user, *ttl)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, tok)
	return nil
}

func seed(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("ordersd seed", flag.ContinueOnError)
	product := fs.String("product", "", "product id")
	stock := fs.Int64("stock", -1, "units available")
	price := fs.Int64("price", 0, "unit price in cents; 0 makes the product free: its orders are paid without a charge")
	if err := fs.Parse(args); err != nil {
		return err
	}
	url, err := secret("ORDERS_DATABASE_URL")
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := store.MigrateDSN(ctx, url); err != nil {
		return err
	}
	st, err := store.New(pool)
	if err != nil {
		return err
	}
	if err := st.SeedProduct(ctx, *product, *stock, *price); err != nil {
		return err
	}
	if *price == 0 {
		fmt.Fprintf(stdout, "product %s: %d units, free (paid without a charge)\n", *product, *stock)
		return nil
	}
	fmt.Fprintf(stdout, "product %s: %d units at %d cents\n", *product, *stock, *price)
	return nil
}
