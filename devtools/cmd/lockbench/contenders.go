package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/quorum"
)

// Contender names, in the order they are built and reported.
const (
	nameQuorum        = "quorumlock"
	nameQuorumNoGuard = "quorumlock-noguard"
	nameRedsync       = "redsync"
	nameRedsyncFF     = "redsync-failfast"
	nameEtcd          = "etcd"
	nameSingle        = "single-node"
	nameFloor         = "floor"
	// nameCounterSem is the per-node counter semaphore, a contender of
	// the semaphore scenarios only (see semaphore.go).
	nameCounterSem = "counter-semaphore"
)

// contenderNames lists the lock contenders, which -only accepts.
var contenderNames = []string{nameQuorum, nameQuorumNoGuard, nameRedsync, nameRedsyncFF, nameEtcd, nameSingle, nameFloor}

// primitiveOnlyNames lists the contenders of the primitive scenarios that
// are no lock contender, which -only accepts too.
var primitiveOnlyNames = []string{nameCounterSem}

// contendedMaxWait bounds one waiting acquire in the contended scenarios,
// for every contender that waits: generous, so that a worker that loses
// many times in a row keeps waiting instead of counting an error.
const contendedMaxWait = 10 * time.Second

// held is a lock a contender acquired.
type held interface {
	Unlock(ctx context.Context) error
}

// contender is one lock implementation under test.
type contender struct {
	name string
	// try makes one attempt to acquire key (the uncontended scenarios).
	try func(ctx context.Context, key string) (held, error)
	// wait acquires key, waiting while another worker holds it (the
	// contended scenarios); nil for a contender that cannot wait.
	wait func(ctx context.Context, key string) (held, error)
	// multi acquires every key of keys, waiting while other workers hold
	// some (the multi scenarios); nil for a contender that cannot wait.
	// keys is the caller's: multi must not keep it.
	multi func(ctx context.Context, keys []string) (held, error)
	// prims builds the primitives beyond the mutex on the contender's
	// Locker (quorum's and etcdlock's); nil for the others.
	prims lease.Primitives
}

// contenderSet is every contender built on one set of connections, which
// it owns.
type contenderSet struct {
	list    []contender
	conns   conns
	lockers []io.Closer // the quorum and etcd Lockers
}

// conns is what one set of contenders talks to: one go-redis client per
// Redis node, and a client of the etcd cluster (nil when etcd does not run).
type conns struct {
	redis []redis.UniversalClient
	etcd  *clientv3.Client
}

// close closes the clients.
func (cn conns) close() error {
	var errs []error
	for _, c := range cn.redis {
		errs = append(errs, c.Close())
	}
	if cn.etcd != nil {
		errs = append(errs, cn.etcd.Close())
	}
	return errors.Join(errs...)
}

// newContenders builds the contenders cfg wants on cn, which the set then
// owns: on error, newContenders closes them.
func newContenders(cn conns, cfg config) (*contenderSet, error) {
	set := &contenderSet{conns: cn}
	var rs *redsync.Redsync
	if cfg.wants(nameRedsync) || cfg.wants(nameRedsyncFF) {
		pools := make([]rsredis.Pool, len(cn.redis))
		for i, c := range cn.redis {
			pools[i] = goredis.NewPool(c)
		}
		rs = redsync.New(pools...)
	}
	for _, name := range contenderNames {
		if !cfg.wants(name) {
			continue
		}
		c, locker, err := buildContender(name, cn, rs, cfg)
		if err != nil {
			_ = set.close()
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if locker != nil {
			set.lockers = append(set.lockers, locker)
		}
		set.list = append(set.list, c)
	}
	return set, nil
}

// buildContender builds contender name on cn (rs: redsync over cn's Redis
// clients, when a redsync contender runs), and returns the Locker to close
// with the set, if any.
func buildContender(name string, cn conns, rs *redsync.Redsync, cfg config) (contender, io.Closer, error) {
	switch name {
	case nameQuorum, nameQuorumNoGuard:
		opts := []quorum.Option{quorum.WithTTL(cfg.ttl), quorum.WithMaxWait(contendedMaxWait)}
		if cfg.timeout > 0 {
			opts = append(opts, quorum.WithNodeTimeout(cfg.timeout))
		}
		if name == nameQuorumNoGuard {
			opts = append(opts, quorum.WithAmnesiaGuard(false))
		}
		l, err := quorum.New(cn.redis, opts...)
		if err != nil {
			return contender{}, nil, err
		}
		c := lockerContender(name, l)
		c.prims = l
		return c, l, nil
	case nameEtcd:
		l, err := newEtcdLocker(cn.etcd, cfg)
		if err != nil {
			return contender{}, nil, err
		}
		c := lockerContender(name, l)
		c.prims = l
		return c, l, nil
	case nameRedsync, nameRedsyncFF:
		return redsyncContender(name, rs, cfg.ttl, cfg.opTimeout, name == nameRedsyncFF), nil, nil
	case nameSingle:
		s := newSingleNode(cn.redis[0], cfg.ttl)
		wait := func(ctx context.Context, key string) (held, error) { return s.lock(ctx, key, contendedMaxWait) }
		return contender{name: name, try: s.tryLock, wait: wait, multi: inOrder(wait, cfg.opTimeout)}, nil, nil
	case nameFloor:
		return contender{name: name, try: floor{cn.redis}.round}, nil, nil
	}
	return contender{}, nil, fmt.Errorf("unknown contender %q", name)
}

// close closes the Lockers of the set, then its clients.
func (s *contenderSet) close() error {
	var errs []error
	for _, l := range s.lockers {
		errs = append(errs, l.Close())
	}
	return errors.Join(append(errs, s.conns.close())...)
}

// lockerContender is a lease.Locker (quorum's or etcdlock's): TryLock
// when uncontended, Lock (its own waiting, bounded by WithMaxWait) when
// contended, and LockMulti for several keys (quorum: one lease of every
// key, all or nothing per node; etcdlock: one recipe lock per key in sorted
// order, on the Locker's one session). A failed call's nil lease.Lease
// stays a nil held.
func lockerContender(name string, l lease.Locker) contender {
	return contender{
		name:  name,
		try:   func(ctx context.Context, key string) (held, error) { return l.TryLock(ctx, key) },
		wait:  func(ctx context.Context, key string) (held, error) { return l.Lock(ctx, key) },
		multi: func(ctx context.Context, keys []string) (held, error) { return l.LockMulti(ctx, keys...) },
	}
}

// redsyncContender is a redsync mutex over the same nodes: one try when
// uncontended, redsync's default tries and retry delays when contended,
// and for several keys one mutex per key taken in sorted key order (see
// inOrder), releasing what it took within release when one fails.
func redsyncContender(name string, rs *redsync.Redsync, ttl, release time.Duration, failFast bool) contender {
	base := []redsync.Option{redsync.WithExpiry(ttl)}
	if failFast {
		base = append(base, redsync.WithFailFast(true))
	}
	once := append(base[:len(base):len(base)], redsync.WithTries(1))
	acquire := func(ctx context.Context, key string, opts []redsync.Option) (held, error) {
		m := rs.NewMutex(key, opts...)
		if err := m.LockContext(ctx); err != nil {
			return nil, err
		}
		return redsyncHeld{m}, nil
	}
	wait := func(ctx context.Context, key string) (held, error) { return acquire(ctx, key, base) }
	return contender{
		name:  name,
		try:   func(ctx context.Context, key string) (held, error) { return acquire(ctx, key, once) },
		wait:  wait,
		multi: inOrder(wait, release),
	}
}

// inOrder holds several keys with a one-key lock the deadlock-free way:
// it acquires them (each once) with wait one after another in sorted key
// order, and hands them back as one held that releases them in reverse.
// When an acquisition fails it releases what it took, in reverse, under a
// deadline of release from then (not under ctx, which may have ended), and
// fails.
func inOrder(wait func(ctx context.Context, key string) (held, error), release time.Duration) func(context.Context, []string) (held, error) {
	return func(ctx context.Context, keys []string) (held, error) {
		sorted := slices.Compact(slices.Sorted(slices.Values(keys)))
		hs := make(heldInOrder, 0, len(sorted))
		for _, k := range sorted {
			h, err := wait(ctx, k)
			if err != nil {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), release)
				defer cancel()
				return nil, errors.Join(err, hs.Unlock(rctx))
			}
			hs = append(hs, h)
		}
		return hs, nil
	}
}

// heldInOrder is several locks, in the order they were acquired.
type heldInOrder []held

// Unlock releases every lock, the last acquired first, even when one
// fails, and joins their errors.
func (hs heldInOrder) Unlock(ctx context.Context) error {
	var errs []error
	for i := len(hs) - 1; i >= 0; i-- {
		errs = append(errs, hs[i].Unlock(ctx))
	}
	return errors.Join(errs...)
}

// redsyncHeld is a locked redsync mutex.
type redsyncHeld struct{ m *redsync.Mutex }

// Unlock releases the mutex; redsync reports a release that reached no
// majority as false with no error, which counts as an error here.
func (h redsyncHeld) Unlock(ctx context.Context) error {
	ok, err := h.m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: unlock not confirmed")
	}
	return err
}

// floor is the network floor of one Redlock round: one PING to every node
// in parallel, waiting for every answer. It locks nothing: one "pair" of
// the floor is one round.
type floor struct{ clients []redis.UniversalClient }

// round pings every node at once and waits for all of them.
func (f floor) round(ctx context.Context, _ string) (held, error) {
	errs := make([]error, len(f.clients))
	var wg sync.WaitGroup
	for i, c := range f.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Ping(ctx).Err()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return nothingHeld{}, nil
}

// nothingHeld is the floor's "lock": releasing it costs nothing.
type nothingHeld struct{}

// Unlock does nothing.
func (nothingHeld) Unlock(context.Context) error { return nil }
