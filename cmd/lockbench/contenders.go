package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/quorum"
)

// Contender names, in the order they are built and reported.
const (
	nameQuorum        = "quorumlock"
	nameQuorumNoGuard = "quorumlock-noguard"
	nameRedsync       = "redsync"
	nameRedsyncFF     = "redsync-failfast"
	nameSingle        = "single-node"
	nameFloor         = "floor"
)

// contenderNames lists every contender -only accepts.
var contenderNames = []string{nameQuorum, nameQuorumNoGuard, nameRedsync, nameRedsyncFF, nameSingle, nameFloor}

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
}

// contenderSet is every contender built on one set of clients, and what
// to close when done.
type contenderSet struct {
	list    []contender
	lockers []*quorum.Locker
}

// newContenders builds the contenders named by only (all when empty) on
// clients, one client per node.
func newContenders(clients []redis.UniversalClient, cfg config) (*contenderSet, error) {
	set := &contenderSet{}
	want := func(name string) bool { return len(cfg.only) == 0 || slices.Contains(cfg.only, name) }
	opts := []quorum.Option{quorum.WithTTL(cfg.ttl), quorum.WithMaxWait(contendedMaxWait)}
	if cfg.timeout > 0 {
		opts = append(opts, quorum.WithNodeTimeout(cfg.timeout))
	}
	var rs *redsync.Redsync
	if want(nameRedsync) || want(nameRedsyncFF) {
		pools := make([]rsredis.Pool, len(clients))
		for i, c := range clients {
			pools[i] = goredis.NewPool(c)
		}
		rs = redsync.New(pools...)
	}
	for _, name := range contenderNames {
		if !want(name) {
			continue
		}
		var c contender
		switch name {
		case nameQuorum, nameQuorumNoGuard:
			o := opts
			if name == nameQuorumNoGuard {
				o = append(o[:len(o):len(o)], quorum.WithAmnesiaGuard(false))
			}
			l, err := quorum.New(clients, o...)
			if err != nil {
				_ = set.close()
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			set.lockers = append(set.lockers, l)
			c = quorumContender(name, l)
		case nameRedsync:
			c = redsyncContender(name, rs, cfg.ttl, cfg.opTimeout, false)
		case nameRedsyncFF:
			c = redsyncContender(name, rs, cfg.ttl, cfg.opTimeout, true)
		case nameSingle:
			s := newSingleNode(clients[0], cfg.ttl)
			wait := func(ctx context.Context, key string) (held, error) { return s.lock(ctx, key, contendedMaxWait) }
			c = contender{name: name, try: s.tryLock, wait: wait, multi: inOrder(wait, cfg.opTimeout)}
		case nameFloor:
			c = contender{name: name, try: floor{clients}.round}
		}
		set.list = append(set.list, c)
	}
	return set, nil
}

// close closes the quorum Lockers of the set; the clients stay open.
func (s *contenderSet) close() error {
	var errs []error
	for _, l := range s.lockers {
		errs = append(errs, l.Close())
	}
	return errors.Join(errs...)
}

// quorumContender is a quorum.Locker: TryLock when uncontended, Lock (its
// own retries, bounded by WithMaxWait) when contended, and LockMulti (one
// lease of every key, all or nothing per node) for several keys.
func quorumContender(name string, l *quorum.Locker) contender {
	lease := func(le *quorum.Lease, err error) (held, error) {
		if err != nil {
			return nil, err
		}
		return le, nil
	}
	return contender{
		name: name,
		try:  func(ctx context.Context, key string) (held, error) { return lease(l.TryLock(ctx, key)) },
		wait: func(ctx context.Context, key string) (held, error) { return lease(l.Lock(ctx, key)) },
		multi: func(ctx context.Context, keys []string) (held, error) {
			return lease(l.LockMulti(ctx, keys...))
		},
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
