package main

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quorumlock/quorumlock/etcdlock"
	"github.com/quorumlock/quorumlock/internal/wait"
	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/quorum"
)

// Names of the election contenders beside the lock contenders' own.
const nameEtcdCrash = "etcd-crash"

// electContender is one way an election's leader dies: a backend, and
// what killing its leader does.
type electContender struct {
	name string
	kill string // what the kill does, for the report
	ttl  time.Duration
	// open returns a candidate in the election name on Lockers and
	// clients of its own, with terms from f.
	open func(name string, f lease.Fencer) (*candidate, error)
}

// candidate is one candidate of an election round, on its own Locker and
// clients.
type candidate struct {
	e lease.Election
	// die kills the candidate: it stops its Locker (and keep-alives)
	// without resigning.
	die func() error
	// close closes what is left of it (after die too).
	close func() error
}

// electTally is one contender's figures over the rounds of the election
// scenario: one kill per round.
type electTally struct {
	name, kill string
	failovers  []time.Duration // from the kill to the next leader's Campaign returning
	termUps    []int64         // the next leader's term minus the dead one's
	errors     int
	firstErr   error
}

// fail counts a round that measured nothing.
func (t *electTally) fail(err error) {
	t.errors++
	if t.firstErr == nil {
		t.firstErr = err
	}
}

// memFencer is the election scenario's Fencer: in memory, strictly
// increasing per key (the bench's stand-in for fencing.Issuer).
type memFencer struct {
	mu   sync.Mutex
	last map[string]int64
}

// Next returns the key's next token.
func (f *memFencer) Next(_ context.Context, key string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.last == nil {
		f.last = map[string]int64{}
	}
	f.last[key]++
	return f.last[key], nil
}

// electionContenders returns the contenders of the election scenario
// that run: quorumlock (Close leaves the leader's key to expire), etcd
// (Close revokes the session) and etcd-crash (the client is closed first,
// so nothing is revoked and the session's lease expires in etcd).
func (b *bench) electionContenders() []electContender {
	var cs []electContender
	if b.cfg.wants(nameQuorum) {
		cs = append(cs, electContender{name: nameQuorum, ttl: b.cfg.ttl, open: b.quorumCandidate,
			kill: "Locker.Close: its watchdog stops, the key stays on the nodes until its TTL"})
	}
	if b.cfg.wants(nameEtcd) && len(b.eps.etcd) > 0 {
		ttl := etcdTTL(b.cfg.etcdTTL)
		cs = append(cs,
			electContender{name: nameEtcd, ttl: ttl, open: b.etcdCandidate(false),
				kill: "Locker.Close: etcdlock revokes its session's lease, which deletes the key at once (a clean exit, not a crash)"},
			electContender{name: nameEtcdCrash, ttl: ttl, open: b.etcdCandidate(true),
				kill: "the etcd client is closed first, then the Locker: no keep-alive, no revoke; etcd expires the lease after its TTL (a crash)"})
	}
	return cs
}

// quorumCandidate is a candidate on a quorum Locker of its own, on clients
// of its own.
func (b *bench) quorumCandidate(name string, f lease.Fencer) (*candidate, error) {
	clients := openClients(b.eps.redis, 4)
	closeClients := func() error { return conns{redis: clients}.close() }
	opts := []quorum.Option{quorum.WithTTL(b.cfg.ttl), quorum.WithMaxWait(contendedMaxWait), quorum.WithFencer(f)}
	if b.cfg.timeout > 0 {
		opts = append(opts, quorum.WithNodeTimeout(b.cfg.timeout))
	}
	l, err := quorum.New(clients, opts...)
	if err != nil {
		return nil, errors.Join(err, closeClients())
	}
	e, err := l.Election(name)
	if err != nil {
		return nil, errors.Join(err, l.Close(), closeClients())
	}
	return &candidate{e: e, die: l.Close, close: func() error { return errors.Join(l.Close(), closeClients()) }}, nil
}

// etcdCandidate returns how to open a candidate on an etcdlock Locker of
// its own, on an etcd client of its own; with crash, its death closes the
// client before the Locker.
func (b *bench) etcdCandidate(crash bool) func(string, lease.Fencer) (*candidate, error) {
	return func(name string, f lease.Fencer) (*candidate, error) {
		cli, err := openEtcd(b.eps.etcd)
		if err != nil {
			return nil, err
		}
		var once sync.Once
		closeCli := func() (err error) {
			once.Do(func() { err = cli.Close() })
			return err
		}
		l, err := b.etcdCandidateLocker(cli, f)
		if err != nil {
			return nil, errors.Join(err, closeCli())
		}
		e, err := l.Election(name)
		if err != nil {
			return nil, errors.Join(err, l.Close(), closeCli())
		}
		die := l.Close
		if crash {
			die = func() error { return errors.Join(closeCli(), l.Close()) }
		}
		return &candidate{e: e, die: die, close: func() error { return errors.Join(l.Close(), closeCli()) }}, nil
	}
}

// etcdCandidateLocker is an election candidate's etcdlock Locker on cli:
// the etcd contender's TTL and node timeout, terms from f.
func (b *bench) etcdCandidateLocker(cli *clientv3.Client, f lease.Fencer) (*etcdlock.Locker, error) {
	opts := []etcdlock.Option{etcdlock.WithTTL(b.cfg.etcdTTL), etcdlock.WithMaxWait(contendedMaxWait), etcdlock.WithFencer(f)}
	if b.cfg.timeout > 0 {
		opts = append(opts, etcdlock.WithNodeTimeout(b.cfg.timeout))
	}
	return etcdlock.New(cli, opts...)
}

// runElection runs the election scenario, rounds interleaving the
// contenders: each round of each contender is one election of its own (a
// fresh name), one leader killed.
func (b *bench) runElection(ctx context.Context, sc scenario) (*scenarioRun, error) {
	cs := b.electionContenders()
	r := &scenarioRun{sc: sc}
	for _, c := range cs {
		r.elect = append(r.elect, &electTally{name: c.name, kill: c.kill})
	}
	for round := range b.cfg.rounds {
		for k := range cs {
			if err := ctx.Err(); err != nil {
				return r, nil
			}
			i := (round + k) % len(cs)
			c := cs[i]
			b.progress.Start(fmt.Sprintf("%s r%d %s", sc.name, round+1, c.name))
			// The kill comes at a random point of the leader's keep-alive
			// period (a third of its TTL), after 250ms for the other
			// candidates to start waiting.
			rng := mrand.New(mrand.NewPCG(b.cfg.seed, uint64(round)<<32|uint64(i)))
			settle := 250*time.Millisecond + time.Duration(rng.Int64N(int64(c.ttl/3)))
			name := fmt.Sprintf("lockbench:%s:%s:%s:%d", b.runID, sc.name, c.name, round)
			err := b.electOnce(ctx, c, name, settle, r.elect[i])
			b.progress.Done()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c.name, err)
			}
		}
	}
	return r, nil
}

// electOnce runs one round of contender c on the election name: three
// candidates, the first leads, the others campaign, the leader dies after
// settle; it records the time until another's Campaign returns, and the
// term's increase, into t. It returns only the errors of closing the
// candidates.
func (b *bench) electOnce(ctx context.Context, c electContender, name string, settle time.Duration, t *electTally) (err error) {
	cands := make([]*candidate, 0, electionCandidates)
	defer func() {
		for _, cd := range cands {
			err = errors.Join(err, cd.close())
		}
	}()
	f := &memFencer{}
	for range electionCandidates {
		cd, err := c.open(name, f)
		if err != nil {
			t.fail(err)
			return nil
		}
		cands = append(cands, cd)
	}
	// Every wait of the round is bounded: three TTLs and 10s.
	bctx, cancel := context.WithTimeout(ctx, 3*c.ttl+10*time.Second)
	defer cancel()
	first, err := cands[0].e.Campaign(bctx, "candidate-0")
	if err != nil {
		t.fail(fmt.Errorf("first campaign: %w", err))
		return nil
	}
	next := b.campaignAll(bctx, cands[1:])
	defer next.stop(ctx, b.cfg.opTimeout)
	if err := wait.Sleep(bctx, settle); err != nil {
		t.fail(err)
		return nil
	}
	killed := time.Now()
	if err := cands[0].die(); err != nil {
		t.fail(fmt.Errorf("kill: %w", err))
		return nil
	}
	select {
	case w := <-next.won:
		next.took = append(next.took, w.le)
		switch {
		case w.err != nil:
			t.fail(fmt.Errorf("next campaign: %w", w.err))
		case w.le.Fence() <= first.Fence():
			t.fail(fmt.Errorf("term %d after term %d: it did not grow", w.le.Fence(), first.Fence()))
		default:
			t.failovers = append(t.failovers, w.at.Sub(killed))
			t.termUps = append(t.termUps, w.le.Fence()-first.Fence())
		}
	case <-bctx.Done():
		t.fail(fmt.Errorf("no new leader within %v of the kill: %w", time.Since(killed).Round(time.Millisecond), bctx.Err()))
	}
	return nil
}

// campaigns is the candidates of a round that campaign while the leader
// lives.
type campaigns struct {
	won    chan victory
	cancel context.CancelFunc
	wg     sync.WaitGroup
	took   []lease.Lease // the leaderships received from won
}

// victory is what one Campaign returned, and when.
type victory struct {
	le  lease.Lease
	err error
	at  time.Time
}

// campaignAll starts a Campaign of every candidate of cands, under ctx.
func (b *bench) campaignAll(ctx context.Context, cands []*candidate) *campaigns {
	ctx, cancel := context.WithCancel(ctx)
	cs := &campaigns{won: make(chan victory, len(cands)), cancel: cancel}
	for i, cd := range cands {
		cs.wg.Go(func() {
			le, err := cd.e.Campaign(ctx, fmt.Sprintf("candidate-%d", i+1))
			cs.won <- victory{le: le, err: err, at: time.Now()}
		})
	}
	return cs
}

// stop ends the campaigns still running, waits for them, and resigns
// every leadership won (each within opTimeout).
func (cs *campaigns) stop(ctx context.Context, opTimeout time.Duration) {
	cs.cancel()
	cs.wg.Wait()
	close(cs.won)
	for w := range cs.won {
		cs.took = append(cs.took, w.le)
	}
	for _, le := range cs.took {
		if le != nil {
			_ = unlockWithin(ctx, le, opTimeout)
		}
	}
}

// describeElection is the subtitle of the election scenario's table.
func describeElection(c config) string {
	return fmt.Sprintf("%d candidates, each on its own Locker and clients, terms from an in-memory strictly increasing fencer (quorum's election needs one; "+
		"etcdlock gets the same); the first leads, the others campaign, and after 250ms plus a random part of a third of the TTL the leader dies "+
		"without resigning (kill, below); failover: from the kill to the moment another candidate's Campaign returns; one kill per contender per round, %d rounds; "+
		"TTL %v (quorumlock), %v (etcd)", electionCandidates, c.rounds, c.ttl, etcdTTL(c.etcdTTL))
}
