// Command orderload drives running ordersd processes over loopback with
// closed-loop HTTP clients, and checks the database afterwards.
//
//	orderload -urls http://127.0.0.1:8081,http://127.0.0.1:8082 [-distinct 66] [-popular 300]
//	    [-duration 8s] [-warmup 2s] [-timeout 2s] [-label auto/mixed] [-json FILE]
//	orderload summary FILE.json...
//
// The load has up to two sides, run at once. Each of the -distinct
// clients orders a product of its own; each of the -popular clients orders
// the one popular product. Every product is seeded first (through the
// order store, on -database-url) with -stock units, more than the run can
// sell. Every client is a user with its own bearer token (signed with
// -jwt-secret, ordersd's ORDERS_JWT_SECRET) and sends POST /orders of one
// unit, each request with a fresh Idempotency-Key, round-robin over the
// -urls, one request after the other: for -warmup, not measured, and then
// for -duration. A client waits at most -timeout for an answer; then it
// counts a timeout and goes on with a new request and a new key.
//
// It prints a markdown table with a row per side: the orders/s (201s
// within the window over its length), the p50 and p99 latency of those
// 201s, and the 409s, the 503s with and without a Retry-After, the
// timeouts and the other answers within the window.
//
// Then it waits (at most -settle) until the instances' /metrics count
// every request sent as answered, the ones the clients gave up on too, and
// checks Postgres: exactly one order per 201 the clients saw (by user id
// and idempotency key), of the product the request named; no order for a
// request answered otherwise, but requests whose outcome the client could
// not learn (a timeout) may have one; for every product of the run,
// available + sold = seeded and no negative stock; and ordersd's own
// invariants (store.CheckInvariants) hold. The exit status is 1 when the
// check fails, or the run could not be made; 2 on bad usage.
//
// summary prints one table of the -json files of several runs; a run
// labelled MODE/SHAPE is compared with the run labelled off/SHAPE.
//
// The secrets are never printed; prefer the variables ORDERS_JWT_SECRET
// and ORDERS_DATABASE_URL to the flags, which show in ps. The load goes
// only to loopback URLs. scripts/mixedrun.sh runs it against three ordersd
// processes on a test bed, once per ORDERS_LOCK setting.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quorumlock/quorumlock/orders/store"
)

// adminConns is the size of the command's own pool: seeding and the check.
const adminConns = 4

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// errCheckFailed is the error of a run whose database check failed.
var errCheckFailed = errors.New("the database check failed")

// run executes one command line and returns the exit status.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var err error
	if len(args) > 0 && args[0] == "summary" {
		err = summaryCmd(args[1:], stdout)
	} else {
		err = loadCmd(ctx, args, getenv, stdout, stderr)
	}
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintln(stderr, "orderload:", err)
		return 2
	}
	fmt.Fprintln(stderr, "orderload:", err)
	return 1
}

// summaryCmd prints the summary table of the -json files paths.
func summaryCmd(paths []string, stdout io.Writer) error {
	if len(paths) == 0 {
		return usageError{errors.New("summary: name the -json files of the runs")}
	}
	runs, err := readRuns(paths)
	if err != nil {
		return err
	}
	summarize(stdout, runs)
	return nil
}

// loadCmd parses the flags, makes the run, reports it and fails when the
// check did.
func loadCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c, err := parseConfig(args, getenv, stderr)
	if err != nil {
		return err
	}
	r, err := load(ctx, c)
	if err != nil {
		return err
	}
	report(stdout, r)
	if c.jsonPath != "" {
		if err := writeJSON(c.jsonPath, r); err != nil {
			return fmt.Errorf("-json: %w", err)
		}
	}
	if !r.Check.OK {
		return errCheckFailed
	}
	return nil
}

// load seeds the products, drives the load, waits for the instances to
// settle and checks the database.
func load(ctx context.Context, c config) (runJSON, error) {
	var id [4]byte
	if _, err := rand.Read(id[:]); err != nil {
		return runJSON{}, fmt.Errorf("run id: %w", err)
	}
	pool, err := openPool(ctx, c.databaseURL)
	if err != nil {
		return runJSON{}, err
	}
	defer pool.Close()
	st, err := store.New(pool)
	if err != nil {
		return runJSON{}, fmt.Errorf("store: %w", err)
	}
	sides, err := makeSides(c, hex.EncodeToString(id[:]))
	if err != nil {
		return runJSON{}, err
	}
	if err := seed(ctx, st, sides, c.stock); err != nil {
		return runJSON{}, err
	}
	l := newLoader(c)
	defer l.close()
	before, err := l.answered(ctx)
	if err != nil {
		return runJSON{}, fmt.Errorf("the instances' metrics, before the load: %w", err)
	}
	start := time.Now().Add(c.warmup)
	w := window{start: start, end: start.Add(c.duration)}
	tallies := l.drive(ctx, sides, w)
	if err := ctx.Err(); err != nil {
		return runJSON{}, fmt.Errorf("interrupted: %w", err)
	}
	r := figures(c, sides, tallies, w)
	r.Answered, err = l.settle(ctx, before, r.Sent, c.settle)
	if err != nil {
		return runJSON{}, fmt.Errorf("the instances' metrics, after the load: %w", err)
	}
	r.Settled = r.Answered >= r.Sent
	if r.Check, err = checkDB(ctx, pool, sides, tallies, c.stock); err != nil {
		return runJSON{}, fmt.Errorf("check the database: %w", err)
	}
	return r, nil
}

// openPool opens the command's small pool on url. An error names no part
// of the URL, which carries the password.
func openPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, errors.New("the database URL does not parse")
	}
	pcfg.MaxConns = adminConns
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return pool, nil
}

// figures are the run's figures but the check's and the settle's.
func figures(c config, sides []side, tallies [][]*tally, w window) runJSON {
	r := runJSON{Label: c.label, Instances: len(c.urls), Distinct: c.distinct, Popular: c.popular,
		WarmupS: c.warmup.Seconds(), WindowS: w.end.Sub(w.start).Seconds(), TimeoutS: c.timeout.Seconds()}
	for i, s := range sides {
		r.Sides = append(r.Sides, sideFigures(s, tallies[i], w))
		for _, t := range tallies[i] {
			r.Sent += int64(t.sent)
		}
	}
	return r
}
