// Command orderbench measures POST /orders end to end: HTTP, bearer-token
// check, idempotency claim in Redis, stock lock (or not), the order
// transaction in Postgres, and the answer.
//
// It starts its own test bed (five Redis masters and Postgres;
// QUORUMLOCK_TESTBED chooses the provider), migrates a fresh database on
// it, and for every (scenario, mode) pair runs three service instances in
// this process, each with its own pgx pool, go-redis clients, quorum.Locker
// (fenced by a fencing.Issuer) and idempotency store, behind its own
// loopback HTTP server: what three ordersd processes sharing one Postgres
// and one set of Redis masters would be. Traffic goes only to that bed and
// to loopback.
//
// Scenarios (-scenarios):
//
//	distinct  every client orders its own product: no two requests want the same stock row
//	hot       every client orders product "42": all requests want one stock row
//
// Modes (-modes):
//
//	lock  the instances take the quorum stock lock (orders.WithLocker)
//	db    no lock: Postgres alone arbitrates (row lock, fence taken in the transaction)
//
// Both modes keep the Redis idempotency fast path (orders.WithIdempotency).
//
// -clients goroutines, each a user with its own bearer token, send POST
// /orders round-robin over the three instances, every request with a fresh
// Idempotency-Key and quantity 1, for -warmup (not measured) and then
// -duration. After each run every loop has stopped, and the database must
// hold exactly one order per 201 answer and have lost exactly that much
// stock; the command fails when it does not. It prints a markdown table,
// and per scenario which mode placed orders faster and by what ratio;
// -json writes every figure.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/quorumlock/quorumlock/integration/testbed"
)

// Scenario names.
const (
	scenarioDistinct = "distinct"
	scenarioHot      = "hot"
)

// Mode names.
const (
	modeLock = "lock"
	modeDB   = "db"
)

var (
	allScenarios = []string{scenarioDistinct, scenarioHot}
	allModes     = []string{modeLock, modeDB}
)

// Bounds of the flags.
const (
	maxClients      = 1024
	minDuration     = 100 * time.Millisecond
	maxDuration     = 10 * time.Minute
	maxWarmup       = time.Minute
	minLockWait     = 10 * time.Millisecond
	maxLockWait     = 5 * time.Second
	minReqTimeout   = time.Second
	maxReqTimeout   = 5 * time.Minute
	maxPoolConns    = 256
	instancesPerRun = 3
	redisNodes      = 5
)

// config is the parsed command line.
type config struct {
	clients        int
	duration       time.Duration
	warmup         time.Duration
	scenarios      []string
	modes          []string
	lockWait       time.Duration
	requestTimeout time.Duration
	poolConns      int
	fsync          string
	jsonPath       string
	quiet          bool
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout)
	switch {
	case errors.Is(err, flag.ErrHelp):
		// The flag set printed the usage.
	case err != nil:
		fmt.Fprintln(os.Stderr, "orderbench:", err)
		os.Exit(1)
	}
}

// parse reads and validates the flags.
func parse(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("orderbench", flag.ContinueOnError)
	scen := fs.String("scenarios", strings.Join(allScenarios, ","), "comma-separated scenarios: "+strings.Join(allScenarios, ", "))
	modes := fs.String("modes", strings.Join(allModes, ","), "comma-separated modes: "+strings.Join(allModes, ", "))
	fs.IntVar(&c.clients, "clients", 64, fmt.Sprintf("concurrent clients, each its own user (1..%d)", maxClients))
	fs.DurationVar(&c.duration, "duration", 5*time.Second, "measured length of each (scenario, mode) run")
	fs.DurationVar(&c.warmup, "warmup", time.Second, "unmeasured load before each run's measurement")
	fs.DurationVar(&c.lockWait, "lock-wait", 2*time.Second, "longest wait for the stock lock in lock mode (ordersd's ORDERS_LOCK_WAIT)")
	fs.DurationVar(&c.requestTimeout, "request-timeout", 30*time.Second, "client-side bound of one request")
	fs.IntVar(&c.poolConns, "pg-conns", 0, "pgx pool size of each instance (0: the pgx default, as ordersd)")
	fs.StringVar(&c.fsync, "fsync", testbed.FsyncEverySec, "appendfsync of the bed's Redis masters: always, everysec or off")
	fs.StringVar(&c.jsonPath, "json", "", "write every figure as JSON to this file")
	fs.BoolVar(&c.quiet, "quiet", false, "no progress bar on stderr")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if c.scenarios, err = parseList("-scenarios", *scen, allScenarios); err != nil {
		return c, err
	}
	if c.modes, err = parseList("-modes", *modes, allModes); err != nil {
		return c, err
	}
	switch {
	case c.clients < 1 || c.clients > maxClients:
		return c, fmt.Errorf("-clients %d: want 1..%d", c.clients, maxClients)
	case c.duration < minDuration || c.duration > maxDuration:
		return c, fmt.Errorf("-duration %v: want %v..%v", c.duration, minDuration, maxDuration)
	case c.warmup < 0 || c.warmup > maxWarmup:
		return c, fmt.Errorf("-warmup %v: want 0..%v", c.warmup, maxWarmup)
	case c.lockWait < minLockWait || c.lockWait > maxLockWait:
		return c, fmt.Errorf("-lock-wait %v: want %v..%v", c.lockWait, minLockWait, maxLockWait)
	case c.requestTimeout < minReqTimeout || c.requestTimeout > maxReqTimeout:
		return c, fmt.Errorf("-request-timeout %v: want %v..%v", c.requestTimeout, minReqTimeout, maxReqTimeout)
	case c.requestTimeout <= c.lockWait:
		return c, fmt.Errorf("-request-timeout %v: want more than -lock-wait %v, or waiting requests time out on the client", c.requestTimeout, c.lockWait)
	case c.poolConns < 0 || c.poolConns > maxPoolConns:
		return c, fmt.Errorf("-pg-conns %d: want 0 (the pgx default) or 1..%d", c.poolConns, maxPoolConns)
	}
	switch c.fsync {
	case testbed.FsyncAlways, testbed.FsyncEverySec, testbed.FsyncOff:
	default:
		return c, fmt.Errorf("-fsync %q: want always, everysec or off", c.fsync)
	}
	return c, nil
}

// parseList splits a comma-separated flag value into known, distinct
// names, in the order given.
func parseList(flagName, value string, known []string) ([]string, error) {
	var out []string
	for _, name := range strings.Split(value, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name == "":
			return nil, fmt.Errorf("%s %q: empty name: want some of %s", flagName, value, strings.Join(known, ", "))
		case !slices.Contains(known, name):
			return nil, fmt.Errorf("%s: unknown name %q: want some of %s", flagName, name, strings.Join(known, ", "))
		case slices.Contains(out, name):
			return nil, fmt.Errorf("%s: %q given twice", flagName, name)
		}
		out = append(out, name)
	}
	return out, nil
}

// run parses args, runs every (scenario, mode) pair and writes the report
// to out. It fails when a run's correctness check fails, after the report.
func run(ctx context.Context, args []string, out io.Writer) error {
	cfg, err := parse(args)
	if err != nil {
		return err
	}
	b, err := setUp(ctx, cfg)
	if err != nil {
		return err
	}
	defer b.close()
	res, err := b.runAll(ctx)
	if err != nil {
		return err
	}
	s := summarize(cfg, b.provider, b.runID, res)
	report(out, s)
	if cfg.jsonPath != "" {
		if err := writeJSON(cfg.jsonPath, s); err != nil {
			return err
		}
	}
	return checkFailures(s)
}
