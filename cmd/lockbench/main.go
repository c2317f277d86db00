// Command lockbench runs every lock contender side by side on the same Redis
// nodes and prints medians and ratios.
//
// Contenders, each doing lock+unlock pairs on its own keys:
//
//	quorumlock          quorum.Locker over every node (Redlock, majority of N)
//	quorumlock-noguard  the same with the amnesia guard off, to show its cost
//	redsync             redsync over the same nodes (the reference Redlock client)
//	single-node         SET NX PX + compare-and-delete on the first node only
//
// Rounds interleave the contenders (A B C, then B C A, ...) so a machine
// whose speed drifts during the run shifts every contender alike. With no
// -addrs, lockbench starts a test bed of -nodes masters (QUORUMLOCK_TESTBED
// chooses the provider) and stops it afterwards. Traffic goes only to the
// given addresses or to the bed it started.
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
	"sync"
	"syscall"
	"time"

	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/integration/testbed"
	"github.com/quorumlock/quorumlock/quorum"
)

type config struct {
	addrs   []string
	nodes   int
	rounds  int
	ops     int
	workers int
	ttl     time.Duration
	fsync   string
	timeout time.Duration
	only    []string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "lockbench:", err)
		os.Exit(1)
	}
}

func parse(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("lockbench", flag.ContinueOnError)
	addrs := fs.String("addrs", "", "comma-separated Redis masters (default: start a test bed)")
	only := fs.String("only", "", "comma-separated contenders to run (default: all)")
	fs.IntVar(&c.nodes, "nodes", 5, "masters in the bed started when -addrs is empty")
	fs.IntVar(&c.rounds, "rounds", 5, "rounds; each runs every contender once")
	fs.IntVar(&c.ops, "ops", 2000, "lock+unlock pairs per contender per round")
	fs.IntVar(&c.workers, "workers", 8, "concurrent goroutines per contender")
	fs.DurationVar(&c.ttl, "ttl", 2*time.Second, "lock TTL")
	fs.DurationVar(&c.timeout, "node-timeout", 0, "quorumlock per-node timeout (0: the library default)")
	fs.StringVar(&c.fsync, "fsync", testbed.FsyncEverySec, "appendfsync of the bed started when -addrs is empty: always, everysec or off")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if *addrs != "" {
		c.addrs = strings.Split(*addrs, ",")
	}
	if *only != "" {
		c.only = strings.Split(*only, ",")
	}
	switch {
	case c.rounds < 1 || c.rounds > 100:
		return c, fmt.Errorf("-rounds %d: want 1..100", c.rounds)
	case c.ops < 1 || c.ops > 1_000_000:
		return c, fmt.Errorf("-ops %d: want 1..1000000", c.ops)
	case c.workers < 1 || c.workers > 1024 || c.workers > c.ops:
		return c, fmt.Errorf("-workers %d: want 1..min(1024, ops)", c.workers)
	case c.nodes < 1 || c.nodes > 15:
		return c, fmt.Errorf("-nodes %d: want 1..15", c.nodes)
	case c.ttl < 100*time.Millisecond:
		return c, fmt.Errorf("-ttl %v: want at least 100ms", c.ttl)
	}
	return c, nil
}

// contender does one lock+unlock pair on key.
type contender struct {
	name string
	pair func(ctx context.Context, key string) error
}

func contenders(clients []redis.UniversalClient, cfg config) ([]contender, error) {
	ttl := cfg.ttl
	opts := []quorum.Option{quorum.WithTTL(ttl)}
	if cfg.timeout > 0 {
		opts = append(opts, quorum.WithNodeTimeout(cfg.timeout))
	}
	l, err := quorum.New(clients, opts...)
	if err != nil {
		return nil, err
	}
	noGuard, err := quorum.New(clients, append(opts, quorum.WithAmnesiaGuard(false))...)
	if err != nil {
		return nil, err
	}
	pair := func(l *quorum.Locker) func(ctx context.Context, key string) error {
		return func(ctx context.Context, key string) error {
			lease, err := l.TryLock(ctx, key)
			if err != nil {
				return err
			}
			return lease.Unlock(ctx)
		}
	}
	pools := make([]rsredis.Pool, len(clients))
	for i, c := range clients {
		pools[i] = goredis.NewPool(c)
	}
	rs := redsync.New(pools...)
	single := newSingleNode(clients[0], ttl)
	return []contender{
		{"quorumlock", pair(l)},
		{"quorumlock-noguard", pair(noGuard)},
		{"redsync", func(ctx context.Context, key string) error {
			m := rs.NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(1))
			if err := m.LockContext(ctx); err != nil {
				return err
			}
			ok, err := m.UnlockContext(ctx)
			if err == nil && !ok {
				err = errors.New("redsync: unlock not confirmed")
			}
			return err
		}},
		{"single-node", single.pair},
	}, nil
}

// result is one contender's figures over every round.
type result struct {
	name       string
	throughput []float64 // pairs per second, one per round
	latencies  []time.Duration
	errors     int
	firstErr   error
}

func run(ctx context.Context, args []string, out io.Writer) error {
	cfg, err := parse(args)
	if err != nil {
		return err
	}
	addrs := cfg.addrs
	provider := "given addresses"
	if len(addrs) == 0 {
		bed, err := testbed.New(ctx, testbed.Options{Redis: cfg.nodes, AppendFsync: cfg.fsync})
		if err != nil {
			return err
		}
		defer bed.Close()
		addrs = addrs[:0]
		for _, n := range bed.Redis {
			// Brand-new nodes never held a lock: let them vote at once.
			a := n.Admin()
			err := quorum.TrustNode(ctx, a)
			_ = a.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", n.Name(), err)
			}
			addrs = append(addrs, n.DirectAddr())
		}
		provider = "test bed, " + bed.Provider + " provider, appendfsync " + cfg.fsync
	}
	clients := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		o := testbed.ClientOptions(a)
		o.PoolSize = cfg.workers * 2
		clients[i] = redis.NewClient(o)
	}
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	all, err := contenders(clients, cfg)
	if err != nil {
		return err
	}
	cs := all[:0:0]
	for _, c := range all {
		if len(cfg.only) == 0 || slices.Contains(cfg.only, c.name) {
			cs = append(cs, c)
		}
	}
	if len(cs) == 0 {
		return fmt.Errorf("-only %v names no contender", cfg.only)
	}
	results := make([]*result, len(cs))
	for i, c := range cs {
		results[i] = &result{name: c.name}
	}
	// Warm up every contender (connections, script cache). A node given
	// by -addrs that started less than one TTL ago counts toward no
	// majority yet (quorumlock's restart guard), so the warm-up waits that
	// out, bounded.
	for i, c := range cs {
		if err := warm(ctx, c, fmt.Sprintf("lockbench:warm:%d", i), 3*cfg.ttl); err != nil {
			return fmt.Errorf("%s: warm-up: %w", c.name, err)
		}
	}
	for round := 0; round < cfg.rounds; round++ {
		for k := range cs {
			i := (round + k) % len(cs)
			if err := ctx.Err(); err != nil {
				return err
			}
			tp, lat, nerr, ferr := measure(ctx, cs[i], round, cfg)
			r := results[i]
			r.throughput = append(r.throughput, tp)
			r.latencies = append(r.latencies, lat...)
			r.errors += nerr
			if r.firstErr == nil && ferr != nil {
				r.firstErr = ferr
			}
		}
	}
	report(out, cfg, len(addrs), provider, results)
	return nil
}

func warm(ctx context.Context, c contender, key string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		err := c.pair(ctx, key)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// measure runs cfg.ops pairs of one contender over cfg.workers goroutines.
func measure(ctx context.Context, c contender, round int, cfg config) (float64, []time.Duration, int, error) {
	lat := make([]time.Duration, cfg.ops)
	errs := make([]int, cfg.workers)
	first := make([]error, cfg.workers)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < cfg.workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < cfg.ops; i += cfg.workers {
				key := fmt.Sprintf("lockbench:%s:%d:%d", c.name, round, i)
				t := time.Now()
				if err := c.pair(ctx, key); err != nil {
					errs[w]++
					if first[w] == nil {
						first[w] = err
					}
				}
				lat[i] = time.Since(t)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	n := 0
	for _, e := range errs {
		n += e
	}
	return float64(cfg.ops) / elapsed.Seconds(), lat, n, errors.Join(first...)
}

func report(out io.Writer, cfg config, nodes int, provider string, rs []*result) {
	fmt.Fprintf(out, "lockbench: %d nodes (%s), %d rounds x %d lock+unlock pairs, %d workers, ttl %v\n\n",
		nodes, provider, cfg.rounds, cfg.ops, cfg.workers, cfg.ttl)
	fmt.Fprintln(out, "| contender | median pairs/s | p50 latency | p99 latency | errors | throughput vs quorumlock |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|")
	var base float64
	for _, r := range rs {
		if r.name == "quorumlock" {
			base = median(r.throughput)
		}
	}
	for _, r := range rs {
		tp := median(r.throughput)
		ratio := "n/a"
		if base > 0 {
			ratio = fmt.Sprintf("%.2fx", tp/base)
		}
		fmt.Fprintf(out, "| %s | %.0f | %v | %v | %d | %s |\n", r.name, tp,
			percentile(r.latencies, 0.50).Round(time.Microsecond), percentile(r.latencies, 0.99).Round(time.Microsecond), r.errors, ratio)
	}
	for _, r := range rs {
		if r.firstErr != nil {
			fmt.Fprintf(out, "\n%s: first error of a round: %v\n", r.name, r.firstErr)
		}
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p * float64(len(s)-1))
	return s[i]
}
