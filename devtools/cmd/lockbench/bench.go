package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/devtools/testbed"
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
	// direct: contenders on the servers' own addresses, for the fault-free
	// scenarios. proxied: contenders through the bed's fault proxies, for
	// the fault scenarios (nil when none runs). Each owns its clients.
	direct, proxied *contenderSet
	// mixed: the instances of the mixed scenarios, each with its own
	// clients on the direct addresses (nil when none runs).
	mixed []*contenderSet
	// eps are the direct addresses, on which the election scenario opens
	// clients of its own.
	eps endpoints
	// etcdMembers is the size of the etcd cluster (0 when etcd does not
	// run).
	etcdMembers int
	progress    *benchkit.Progress
}

// endpoints are the addresses one set of contenders talks to.
type endpoints struct {
	redis []string
	etcd  []string // none when etcd does not run
}

// setUp starts the bed (without -addrs), opens the clients, builds and
// warms up the contenders.
func setUp(ctx context.Context, cfg config) (b *bench, err error) {
	var id [4]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, err
	}
	b = &bench{cfg: cfg, provider: "given addresses", runID: hex.EncodeToString(id[:])}
	opened := b // the error returns below set b to nil
	defer func() {
		if err != nil {
			opened.close()
		}
	}()
	direct := endpoints{redis: cfg.addrs, etcd: cfg.etcdAddrs}
	var proxied endpoints
	if len(cfg.addrs) == 0 {
		if direct, proxied, err = b.startBed(ctx); err != nil {
			return nil, err
		}
	}
	if !cfg.wants(nameEtcd) {
		direct.etcd, proxied.etcd = nil, nil
	}
	if cfg.pastWindow && (cfg.wants(nameQuorum) || cfg.wants(nameQuorumNoGuard)) {
		// The quorum contenders' restart window is their TTL (the default).
		if err := pastWindow(ctx, direct.redis, cfg.ttl); err != nil {
			return nil, err
		}
	}
	b.etcdMembers = len(direct.etcd)
	b.eps = direct
	pool := directPool(cfg.scenarios)
	if b.direct, err = b.openSet(ctx, direct, pool, "warm"); err != nil {
		return nil, err
	}
	if len(b.direct.list) == 0 && !cfg.wants(nameCounterSem) {
		return nil, fmt.Errorf("-only %v names no contender", cfg.only)
	}
	faults := slices.ContainsFunc(cfg.scenarios, scenario.fault)
	if faults && b.bed != nil {
		if b.proxied, err = b.openSet(ctx, proxied, pool, "warm:proxied"); err != nil {
			return nil, err
		}
	}
	if pool := mixedPool(cfg.scenarios); pool > 0 {
		if err := b.openMixed(ctx, direct, pool); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// openSet opens clients of eps (go-redis clients of pool connections
// each), builds the contenders on them and warms them up on keys named
// after tag.
func (b *bench) openSet(ctx context.Context, eps endpoints, pool int, tag string) (*contenderSet, error) {
	cn := conns{redis: openClients(eps.redis, pool)}
	if len(eps.etcd) > 0 {
		cli, err := openEtcd(eps.etcd)
		if err != nil {
			_ = cn.close()
			return nil, err
		}
		cn.etcd = cli
	}
	set, err := newContenders(cn, b.cfg)
	if err != nil {
		return nil, err
	}
	if err := b.warmSet(ctx, set, tag); err != nil {
		_ = set.close()
		return nil, err
	}
	return set, nil
}

// startBed starts the test bed of -nodes masters (and of an etcd cluster
// when the etcd contender runs), vouches for the masters, and returns the
// direct addresses and those of the fault proxies.
func (b *bench) startBed(ctx context.Context) (direct, proxied endpoints, err error) {
	opts := testbed.Options{Redis: b.cfg.nodes, AppendFsync: b.cfg.fsync}
	if b.cfg.wants(nameEtcd) {
		opts.Etcd = etcdMembers
	}
	bed, err := testbed.New(ctx, opts)
	if err != nil {
		return direct, proxied, err
	}
	b.bed = bed
	for _, n := range bed.Redis {
		// Brand-new nodes never held a lock: let them vote at once.
		a := n.Admin()
		err := quorum.TrustNode(ctx, a)
		_ = a.Close()
		if err != nil {
			return direct, proxied, fmt.Errorf("%s: %w", n.Name(), err)
		}
		direct.redis = append(direct.redis, n.DirectAddr())
		proxied.redis = append(proxied.redis, n.Addr())
	}
	for _, n := range bed.Etcd {
		direct.etcd = append(direct.etcd, n.DirectAddr())
	}
	proxied.etcd = bed.EtcdEndpoints()
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

// close closes the contenders with their clients, and the bed.
func (b *bench) close() {
	for _, set := range append([]*contenderSet{b.direct, b.proxied}, b.mixed...) {
		if set != nil {
			_ = set.close()
		}
	}
	if b.bed != nil {
		_ = b.bed.Close()
	}
}

// results is every figure of one run.
type results struct {
	cfg         config
	nodes       int
	etcdMembers int // 0: etcd did not run
	provider    string
	runID       string
	faultNode   string // the node the fault scenarios slow down or freeze
	runs        []*scenarioRun
	notes       []string
}

// runAll runs every scenario in order.
func (b *bench) runAll(ctx context.Context) (*results, error) {
	res := &results{cfg: b.cfg, nodes: len(b.direct.conns.redis), etcdMembers: b.etcdMembers, provider: b.provider, runID: b.runID,
		notes: slices.Clone(b.cfg.notes)}
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
		if sc.primitive() {
			n = b.primitiveContenders(sc)
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
		case sc.primitive():
			r, err = b.primitiveRun(ctx, sc)
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
// fault (see faultOf), measures every contender again, and removes the
// fault. Each pair runs under -op-timeout, each contender's phase within
// -fault-budget.
func (b *bench) runFault(ctx context.Context, sc scenario) (*scenarioRun, error) {
	cs, skipped := eligible(b.proxied, sc)
	r := &scenarioRun{sc: sc, tallies: newTallies(cs), baselines: newTallies(cs), skipped: skipped}
	f, err := b.faultOf(ctx, sc)
	if err != nil {
		return nil, err
	}
	r.etcdFaultNode = f.etcdNode
	for round := range b.cfg.rounds {
		b.faultPhase(ctx, sc, cs, round, "baseline", r.baselines)
		if err := f.inject(ctx); err != nil {
			return nil, errors.Join(err, f.healWithin(ctx))
		}
		b.faultPhase(ctx, sc, cs, round, "fault", r.tallies)
		if err := f.healWithin(ctx); err != nil {
			return nil, err
		}
		if ctx.Err() != nil {
			return r, nil
		}
	}
	return r, nil
}

// faultPhase measures every contender of cs once in one phase (baseline
// or fault) of a fault scenario's round, into the tallies of into.
func (b *bench) faultPhase(ctx context.Context, sc scenario, cs []contender, round int, name string, into []*tally) {
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

// fault is how a fault scenario injects its fault and heals it.
type fault struct {
	inject, heal func(context.Context) error
	etcdNode     string // the etcd member it hits ("" when etcd does not run)
}

// healWithin heals the fault within 30s, even when ctx has ended: the bed
// must not stay faulty.
func (f fault) healWithin(ctx context.Context) error {
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return f.heal(hctx)
}

// faultyNode is a node the fault scenarios slow down or freeze: a Redis
// node or an etcd member of the bed.
type faultyNode interface {
	AddLatency(ctx context.Context, d time.Duration) error
	Pause(ctx context.Context) error
	Resume(ctx context.Context) error
}

// faultSteps returns how sc injects its fault into n and heals it:
// slow-node delays n's answers by -slow-latency (the bed's proxies),
// node-down freezes n (SIGSTOP or docker pause).
func (b *bench) faultSteps(sc scenario, n faultyNode) (inject, heal func(context.Context) error) {
	if sc.kind == kindNodeDown {
		return n.Pause, n.Resume
	}
	return func(ctx context.Context) error { return n.AddLatency(ctx, b.cfg.slowLatency) },
		func(ctx context.Context) error { return n.AddLatency(ctx, 0) }
}

// faultOf returns sc's fault (see faultSteps): on the last Redis node,
// and on an etcd follower (see etcdFollower) when etcd runs. Healing waits
// until they answer again.
func (b *bench) faultOf(ctx context.Context, sc scenario) (fault, error) {
	in, out := b.faultSteps(sc, b.bed.Redis[len(b.bed.Redis)-1])
	inject := []func(context.Context) error{in}
	heal := []func(context.Context) error{out, func(ctx context.Context) error { return waitHealthy(ctx, b.proxied.conns.redis) }}
	var f fault
	if b.proxied.conns.etcd != nil {
		en, err := etcdFollower(ctx, b.bed)
		if err != nil {
			return f, fmt.Errorf("etcd: %w", err)
		}
		f.etcdNode = en.Name()
		in, out := b.faultSteps(sc, en)
		inject, heal = append(inject, in), append(heal, out, en.WaitReady)
	}
	f.inject = func(ctx context.Context) error {
		for _, step := range inject {
			if err := step(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	// Heal every node, in order, even when one fails.
	f.heal = func(ctx context.Context) error {
		var errs []error
		for _, step := range heal {
			errs = append(errs, step(ctx))
		}
		return errors.Join(errs...)
	}
	return f, nil
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
