package testbed

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Bed is a running set of servers.
type Bed struct {
	// Provider is the provider that started the bed: docker or local.
	Provider string
	// Redis holds one handle per master, in a stable order.
	Redis []*RedisNode
	// Etcd holds one handle per member of the etcd cluster, in a stable
	// order (etcd1, etcd2, ...).
	Etcd []*EtcdNode
	// Postgres is the Postgres server, or nil when none was asked for.
	Postgres *PostgresNode
	// PostgresHA is the Postgres HA group, or nil when none was asked for.
	PostgresHA *PostgresGroup

	closeOnce sync.Once
	closeErr  error
	closers   []func(context.Context) error
}

// New starts a bed. Call Close when done.
func New(ctx context.Context, opts Options) (*Bed, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	p, err := choose(ctx, opts)
	if err != nil {
		return nil, err
	}
	b := &Bed{Provider: p.name()}
	b.closers = append(b.closers, func(context.Context) error { return p.close() })
	fail := func(err error) (*Bed, error) {
		_ = b.Close()
		return nil, fmt.Errorf("testbed (%s): %w%s", p.name(), err, p.hint())
	}
	var shim string
	if opts.Clock && (opts.Redis > 0 || opts.Etcd > 0) {
		if shim, err = buildClockShim(ctx, p.dir()); err != nil {
			_ = b.Close()
			return nil, fmt.Errorf("testbed (%s): Options.Clock: %w", p.name(), err)
		}
	}
	if opts.Postgres {
		pg, err := startPostgres(ctx, p, opts)
		if err != nil {
			return fail(fmt.Errorf("start postgres: %w", err))
		}
		b.Postgres = pg
		b.closers = append(b.closers, pg.close)
	}
	if opts.PostgresHA {
		g, err := startPostgresGroup(ctx, p, opts)
		if err != nil {
			return fail(fmt.Errorf("start the postgres HA group: %w", err))
		}
		b.PostgresHA = g
		b.closers = append(b.closers, g.close)
	}
	if err := b.startRedis(ctx, p, opts, shim); err != nil {
		return fail(fmt.Errorf("start redis: %w", err))
	}
	if opts.Etcd > 0 {
		members, closeAll, err := startEtcdCluster(ctx, p, opts, shim)
		b.closers = append(b.closers, closeAll)
		if err != nil {
			return fail(fmt.Errorf("start etcd: %w", err))
		}
		b.Etcd = members
	}
	return b, nil
}

// startRedis starts opts.Redis masters at once.
func (b *Bed) startRedis(ctx context.Context, p provider, opts Options, shim string) error {
	nodes := make([]*RedisNode, opts.Redis)
	errs := make([]error, opts.Redis)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nodes[i], errs[i] = startRedisNode(ctx, p, i, opts, shim)
		}()
	}
	wg.Wait()
	for i, n := range nodes {
		if n != nil {
			b.Redis = append(b.Redis, n)
			b.closers = append(b.closers, n.close)
		} else if errs[i] == nil {
			errs[i] = errors.New("no node")
		}
	}
	return errors.Join(errs...)
}

// Close stops every server and removes its data. It is safe to call twice.
func (b *Bed) Close() error {
	b.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var errs []error
		for i := len(b.closers) - 1; i >= 0; i-- {
			errs = append(errs, b.closers[i](ctx))
		}
		b.closeErr = errors.Join(errs...)
	})
	return b.closeErr
}

// RedisAddrs returns the stable client address of every Redis node.
func (b *Bed) RedisAddrs() []string {
	addrs := make([]string, len(b.Redis))
	for i, n := range b.Redis {
		addrs[i] = n.Addr()
	}
	return addrs
}

// NewRedisClients returns one new client per Redis node, with
// ClientOptions: they honour context deadlines, never retry a command on
// their own, and use short socket timeouts, as a lock client should. The
// caller closes them (bedtest.RedisClients does it when the test ends).
func (b *Bed) NewRedisClients() []*redis.Client {
	cs := make([]*redis.Client, len(b.Redis))
	for i, n := range b.Redis {
		cs[i] = redis.NewClient(ClientOptions(n.Addr()))
	}
	return cs
}

// ClientOptions are the go-redis options the bed recommends for a lock
// client of the node at addr.
func ClientOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr:                  addr,
		DialTimeout:           time.Second,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
		PoolSize:              32,
		DisableIdentity:       true,
	}
}
