package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/integration/testbed"
	"github.com/quorumlock/quorumlock/internal/benchkit"
	"github.com/quorumlock/quorumlock/internal/wait"
	"github.com/quorumlock/quorumlock/quorum"
)

// bench is one run's nodes, clients and contenders.
type bench struct {
	cfg      config
	bed      *testbed.Bed // nil with -addrs
	provider string
	runID    string // prefixes every key, so runs never share one
	// direct: clients on the servers' own addresses, for the fault-free
	// scenarios. proxied: clients through the bed's fault proxies, for the
	// fault scenarios (nil when none runs).
	directClients, proxiedClients []redis.UniversalClient
	direct, proxied               *contenderSet
	// mixedClients and mixed: the instances of the mixed scenarios, each
	// with its own clients on the direct addresses (nil when none runs).
	mixedClients [][]redis.UniversalClient
	mixed        []*contenderSet
	progress     *benchkit.Progress
}

// setUp starts the bed (without -addrs), opens the clients, builds and
// warms up the contenders.
func setUp(ctx context.Context, cfg config) (b *bench, err error) {
	var id [4]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, err
	}
	b = &bench{cfg: cfg, provider: "given addresses", runID: hex.EncodeToString(id[:])}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	addrs := cfg.addrs
	faults := false
	for _, sc := range cfg.scenarios {
		faults = faults || sc.fault()
	}
	var proxied []string
	if len(addrs) == 0 {
		if addrs, proxied, err = b.startBed(ctx); err != nil {
			return nil, err
		}
	}
	pool := directPool(cfg.scenarios)
	b.directClients = openClients(addrs, pool)
	if b.direct, err = newContenders(b.directClients, cfg); err != nil {
		return nil, err
	}
	if len(b.direct.list) == 0 {
		return nil, fmt.Errorf("-only %v names no contender", cfg.only)
	}
	if faults && b.bed != nil {
		b.proxiedClients = openClients(proxied, pool)
		if b.proxied, err = newContenders(b.proxiedClients, cfg); err != nil {
			return nil, err
		}
	}
	for _, set := range []*contenderSet{b.direct, b.proxied} {
		if err := b.warmSet(ctx, set, "warm"); err != nil {
			return nil, err
		}
	}
	if pool := mixedPool(cfg.scenarios); pool > 0 {
		if err := b.openMixed(ctx, addrs, pool); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// startBed starts the test bed of -nodes masters, vouches for them, and
// returns their direct addresses and those of their fault proxies.
func (b *bench) startBed(ctx context.Context) (direct, proxied []string, err error) {
	bed, err := testbed.New(ctx, testbed.Options{Redis: b.cfg.nodes, AppendFsync: b.cfg.fsync})
	if err != nil {
		return nil, nil, err
	}
	b.bed = bed
	for _, n := range bed.Redis {
		// Brand-new nodes never held a lock: let them vote at once.
		a := n.Admin()
		err := quorum.TrustNode(ctx, a)
		_ = a.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", n.Name(), err)
		}
		direct = append(direct, n.DirectAddr())
		proxied = append(proxied, n.Addr())
	}
	b.provider = "test bed, " + bed.Provider + " provider, appendfsync " + b.cfg.fsync
	return direct, proxied, nil
}

// directPool is the client pool size of the direct and proxied clients:
// room for every worker of the largest scenario they run with a request
// out on each node (the mixed scenarios run on clients of their own).
func directPool(scs []scenario) int {
	pool := 8
	for _, sc := range scs {
		if sc.kind != kindMixed {
			pool = max(pool, 2*sc.workers+8)
		}
	}
	return pool
}

// warmSet warms every contender of set (none when nil) up, on keys named
// after tag.
func (b *bench) warmSet(ctx context.Context, set *contenderSet, tag string) error {
	if set == nil {
		return nil
	}
	for i, c := range set.list {
		if err := warm(ctx, c, fmt.Sprintf("lockbench:%s:%s:%d", b.runID, tag, i), 3*b.cfg.ttl); err != nil {
			return fmt.Errorf("%s: warm-up: %w", c.name, err)
		}
	}
	return nil
}

// openClients opens one go-redis client per address, with the options the
// bed recommends for a lock client.
func openClients(addrs []string, poolSize int) []redis.UniversalClient {
	cs := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		o := testbed.ClientOptions(a)
		o.PoolSize = poolSize
		cs[i] = redis.NewClient(o)
	}
	return cs
}

// close closes the contenders, the clients and the bed.
func (b *bench) close() {
	for _, set := range []*contenderSet{b.direct, b.proxied} {
		if set != nil {
			_ = set.close()
		}
	}
	b.closeMixed()
	for _, c := range append(b.directClients, b.proxiedClients...) {
		_ = c.Close()
	}
	if b.bed != nil {
		_ = b.bed.Close()
	}
}

// results is every figure of one run.
type results struct {
	cfg       config
	nodes     int
	provider  string
	runID     string
	faultNode string // the node the fault scenarios slow down or freeze
	runs      []*scenarioRun
	notes     []string
}

// runAll runs every scenario in order.
func (b *bench) runAll(ctx context.Context) (*results, error) {
	res := &results{cfg: b.cfg, nodes: len(b.directClients), provider: b.provider, runID: b.runID}
	if b.bed != nil {
		res.faultNode = b.bed.Redis[len(b.bed.Redis)-1].Name()
	}
	total := 0
	for _, sc := range b.cfg.scenarios {
		if sc.fault() && b.bed == nil {
			continue
		}
		n := 0
		for _, c := range b.direct.list {
			if sc.runs(c) {
				n++
			}
		}
		switch {
		case sc.fault():
			n *= 2 // baseline and fault
		case sc.kind == kindMixed:
			n *= 3 // hot alone, distinct alone, both
		}
		total += n * b.cfg.rounds
	}
	b.progress = benchkit.NewProgress("lockbench", total, b.cfg.quiet)
	defer b.progress.Finish()
	for _, sc := range b.cfg.scenarios {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if sc.fault() && b.bed == nil {
			res.notes = append(res.notes, fmt.Sprintf("%s skipped: fault scenarios need the test bed lockbench starts (run without -addrs)", sc.name))
			continue
		}
		var (
			r   *scenarioRun
			err error
		)
		switch {
		case sc.fault():
			r, err = b.runFault(ctx, sc)
		case sc.kind == kindMixed:
			r = b.runMixed(ctx, sc)
		default:
			r = b.runClean(ctx, sc)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sc.name, err)
		}
		res.runs = append(res.runs, r)
	}
	return res, ctx.Err()
}

// eligible returns the contenders of set that can run sc, and the names
// of those that cannot.
func eligible(set *contenderSet, sc scenario) (run []contender, skipped []string) {
	for _, c := range set.list {
		if sc.runs(c) {
			run = append(run, c)
		} else {
			skipped = append(skipped, c.name)
		}
	}
	return run, skipped
}

// newTallies returns one empty tally per contender.
func newTallies(cs []contender) []*tally {
	ts := make([]*tally, len(cs))
	for i, c := range cs {
		ts[i] = &tally{name: c.name}
	}
	return ts
}

// runClean runs a solo, hot or multi scenario on the direct clients,
// rounds interleaving the contenders.
func (b *bench) runClean(ctx context.Context, sc scenario) *scenarioRun {
	cs, skipped := eligible(b.direct, sc)
	r := &scenarioRun{sc: sc, tallies: newTallies(cs), skipped: skipped}
	for round := range b.cfg.rounds {
		for k := range cs {
			if ctx.Err() != nil {
				return r
			}
			i := (round + k) % len(cs)
			c := cs[i]
			b.progress.Start(fmt.Sprintf("%s r%d %s", sc.name, round+1, c.name))
			prefix := fmt.Sprintf("lockbench:%s:%s:%s:%d", b.runID, sc.name, c.name, round)
			r.tallies[i].add(b.measureClean(ctx, sc, c, prefix, round), sc.contended())
			b.progress.Done()
		}
	}
	return r
}

// measureClean measures contender c in one round of a solo, hot or multi
// scenario, on keys under prefix.
func (b *bench) measureClean(ctx context.Context, sc scenario, c contender, prefix string, round int) sample {
	switch sc.kind {
	case kindHot:
		return measureHot(ctx, c, prefix+":hot", sc.workers, sc.hold, b.cfg.hotDuration, b.cfg.opTimeout)
	case kindMulti:
		return measureMulti(ctx, c, multiLoad{pool: keys(prefix+":multi", sc.pool), keys: sc.keys, workers: sc.workers,
			duration: b.cfg.hotDuration, opTimeout: b.cfg.opTimeout, seed: b.cfg.seed, round: round})
	}
	return measureSolo(ctx, c, keys(prefix, b.cfg.ops), sc.workers, 0, 0)
}

// runFault runs slow-node or node-down on the proxied clients. Each round
// measures every contender without the fault (the baseline), injects the
// fault into the last node, measures every contender again, and removes
// the fault. Each pair runs under -op-timeout, each contender's phase
// within -fault-budget.
func (b *bench) runFault(ctx context.Context, sc scenario) (*scenarioRun, error) {
	cs, skipped := eligible(b.proxied, sc)
	r := &scenarioRun{sc: sc, tallies: newTallies(cs), baselines: newTallies(cs), skipped: skipped}
	node := b.bed.Redis[len(b.bed.Redis)-1]
	inject := func(ctx context.Context) error { return node.AddLatency(ctx, b.cfg.slowLatency) }
	heal := func(ctx context.Context) error { return node.AddLatency(ctx, 0) }
	if sc.kind == kindNodeDown {
		inject, heal = node.Pause, node.Resume
	}
	phase := func(round int, name string, into []*tally) {
		for k := range cs {
			if ctx.Err() != nil {
				return
			}
			i := (round + k) % len(cs)
			c := cs[i]
			b.progress.Start(fmt.Sprintf("%s r%d %s %s", sc.name, round+1, name, c.name))
			prefix := fmt.Sprintf("lockbench:%s:%s:%s:%s:%d", b.runID, sc.name, name, c.name, round)
			into[i].add(measureSolo(ctx, c, keys(prefix, b.cfg.ops), sc.workers, b.cfg.opTimeout, b.cfg.faultBudget), false)
			b.progress.Done()
		}
	}
	for round := range b.cfg.rounds {
		phase(round, "baseline", r.baselines)
		if err := inject(ctx); err != nil {
			return nil, err
		}
		phase(round, "fault", r.tallies)
		// Heal even when ctx has ended: the bed must not stay faulty.
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		err := heal(hctx)
		if err == nil {
			err = waitHealthy(hctx, b.proxiedClients)
		}
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%s: heal: %w", node.Name(), err)
		}
		if ctx.Err() != nil {
			return r, nil
		}
	}
	return r, nil
}

// waitHealthy waits until every client's node answers PING (a node thawed
// after a pause first works through what queued up), polling within ctx.
func waitHealthy(ctx context.Context, clients []redis.UniversalClient) error {
	for _, c := range clients {
		for {
			err := c.Ping(ctx).Err()
			if err == nil {
				break
			}
			if werr := wait.Sleep(ctx, 50*time.Millisecond); werr != nil {
				return errors.Join(err, werr)
			}
		}
	}
	return nil
}
