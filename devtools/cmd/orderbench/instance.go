package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"runtime/pprof"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/etcdbed"
	"github.com/quorumlock/quorumlock/etcdlock"
	"github.com/quorumlock/quorumlock/fencing"
	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/orders"
	"github.com/quorumlock/quorumlock/orders/idem"
	"github.com/quorumlock/quorumlock/orders/store"
	"github.com/quorumlock/quorumlock/quorum"
)

// Settings the instances share with ordersd's defaults.
const (
	// lockTTL is ordersd's ORDERS_LOCK_TTL default.
	lockTTL = 5 * time.Second
	// processingLease is ordersd's ORDERS_PROCESSING_LEASE default; it
	// must exceed the lock wait by more than a second (see ordersd).
	processingLease = 10 * time.Second
	// redisPoolSize is ordersd's go-redis pool size per node; an instance
	// gets at least one connection per client of the largest -clients
	// count, so the pool never makes a closed-loop client's lock call
	// wait for a connection (a sale's thousands of buyers may wait, as
	// they would on ordersd).
	redisPoolSize = 64
)

// instance is one ordersd-equivalent: its own pool, Redis clients, lock
// (with its own etcd client on the etcd backend), idempotency store and
// service, behind its own loopback HTTP server.
type instance struct {
	pool    *pgxpool.Pool
	clients []redis.UniversalClient
	etcd    *clientv3.Client // the etcd backend's, else nil
	locker  io.Closer        // quorum.Locker or etcdlock.Locker; nil in db mode
	srv     *httptest.Server
}

// startInstances starts instancesPerRun instances in p's mode (and lock
// backend). On error it closes what it started.
func (b *bench) startInstances(ctx context.Context, p runPlan) (_ []*instance, err error) {
	var ins []*instance
	defer func() {
		if err != nil {
			closeInstances(ins)
		}
	}()
	for i := range instancesPerRun {
		var in *instance
		var err error
		// Every goroutine the instance starts carries its role's label,
		// for -cpu-split.
		pprof.Do(ctx, roleLabels(roleInstances), func(ctx context.Context) { in, err = b.startInstance(ctx, p) })
		if in != nil {
			ins = append(ins, in)
		}
		if err != nil {
			return nil, fmt.Errorf("instance %d: %w", i+1, err)
		}
	}
	return ins, nil
}

// startInstance starts one instance. It returns what it opened even on
// error, for the caller to close.
func (b *bench) startInstance(ctx context.Context, p runPlan) (*instance, error) {
	pcfg, err := pgxpool.ParseConfig(b.db.dsn)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	if b.cfg.poolConns > 0 {
		pcfg.MaxConns = int32(b.cfg.poolConns)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("open a pool: %w", err)
	}
	in := &instance{pool: pool}
	for _, n := range b.bed.Redis {
		o := testbed.ClientOptions(n.DirectAddr())
		o.PoolSize = max(redisPoolSize, b.cfg.maxCount())
		in.clients = append(in.clients, redis.NewClient(o))
	}
	st, err := store.New(pool)
	if err != nil {
		return in, fmt.Errorf("store: %w", err)
	}
	issuer, err := fencing.NewReserver(pool)
	if err != nil {
		return in, fmt.Errorf("fence reserver: %w", err)
	}
	claims, err := idem.New(in.clients, idem.WithLease(processingLease))
	if err != nil {
		return in, fmt.Errorf("idempotency store: %w", err)
	}
	opts := []orders.Option{orders.WithIdempotency(claims), orders.WithQueue(orders.DefaultQueueLimit, 2*b.cfg.lockWait)}
	if p.mode == modeLock {
		lock, err := b.openLock(in, p.backend, issuer)
		if err != nil {
			return in, fmt.Errorf("lock (%s): %w", p.backend, err)
		}
		opts = append(opts, orders.WithLocker(lock), orders.WithLockRule(orders.LockRule(b.cfg.lockRule)))
	}
	svc, err := orders.New(st, opts...)
	if err != nil {
		return in, fmt.Errorf("service: %w", err)
	}
	in.srv = httptest.NewServer(svc.Handler(b.verifier))
	return in, nil
}

// openLock opens the instance's stock lock on backend, fenced by fences, as
// ordersd does (its openLock and openEtcdLock, with their defaults): a
// quorum.Locker on the instance's Redis clients, or an etcdlock.Locker on
// an etcd client of the instance's own, of the members' own addresses.
func (b *bench) openLock(in *instance, backend string, fences lease.Fencer) (lease.Locker, error) {
	if backend == backendEtcd {
		cli, err := clientv3.New(etcdbed.Config(b.etcdAddrs...))
		if err != nil {
			return nil, fmt.Errorf("etcd client: %w", err)
		}
		in.etcd = cli
		l, err := etcdlock.New(cli, etcdlock.WithTTL(lockTTL), etcdlock.WithMaxWait(b.cfg.lockWait), etcdlock.WithFencer(fences))
		if err != nil {
			return nil, err
		}
		in.locker = l
		return l, nil
	}
	l, err := quorum.New(in.clients, quorum.WithTTL(lockTTL), quorum.WithMaxWait(b.cfg.lockWait), quorum.WithFencer(fences))
	if err != nil {
		return nil, err
	}
	in.locker = l
	return l, nil
}

// close stops the server (waiting for requests in flight), then closes the
// lock, the etcd client, the Redis clients and the pool.
func (in *instance) close() error {
	if in.srv != nil {
		in.srv.Close()
	}
	var errs []error
	if in.locker != nil {
		errs = append(errs, in.locker.Close())
	}
	if in.etcd != nil {
		errs = append(errs, in.etcd.Close())
	}
	for _, c := range in.clients {
		errs = append(errs, c.Close())
	}
	in.pool.Close()
	return errors.Join(errs...)
}

// closeInstances closes every instance of ins.
func closeInstances(ins []*instance) error {
	var errs []error
	for _, in := range ins {
		errs = append(errs, in.close())
	}
	return errors.Join(errs...)
}
