// Package testbed starts real Redis masters, a real etcd cluster and a real
// Postgres for tests and demos, and injects faults into them.
//
// A bed has N independent Redis masters (no replication between them),
// optionally an etcd cluster of an odd number of members, and optionally
// one Postgres. Every Redis node sits behind an embedded toxiproxy listener
// on loopback, so its address stays the same across kills and restarts, and
// so partitions and latency can be injected the same way for every
// provider. Every etcd member sits behind two: one for its clients and one
// for its peers, whose address it advertises, so the members reach each
// other only through the bed's proxies.
//
// Two providers start the servers:
//   - docker: containers through testcontainers-go. Images come from
//     QUORUMLOCK_REDIS_IMAGE, QUORUMLOCK_ETCD_IMAGE and
//     QUORUMLOCK_POSTGRES_IMAGE (default: the official redis and postgres
//     images, and quorumlock/etcd:bookworm). On machines with no registry,
//     `make images` builds local ones from Debian packages. etcd
//     containers use the host's network, on free loopback ports, so their
//     peer traffic crosses the same proxies as the local provider's.
//   - local: redis-server, etcd and postgres processes from the machine's
//     packages (Debian's etcd-server for etcd), on free loopback ports,
//     with their data in a temporary directory.
//
// QUORUMLOCK_TESTBED=docker|local|auto chooses; auto (the default) takes
// docker when the engine answers and the images the bed runs exist (the
// etcd image only for a bed with etcd), else local. A provider that cannot
// start fails the test with a message that says how to fix it; the bed
// never skips a test.
//
// Faults, on both providers: Pause/Resume, Kill/Restart (with or without
// data), Partition/Heal and AddLatency on a node's address; the same
// partitions and latency on a Link, an extra address of a node for one
// client; Snapshot/RestartFromSnapshot, a node coming back with older data;
// KillLosingTail (AppendFsync=everysec), a node that loses the AOF writes
// the disk had not synced; and SetClockOffset (Options.Clock), a jump of one
// node's wall clock.
//
// etcd members have Pause/Resume, Kill/Restart (always with their data: the
// member rejoins as itself), Partition/Heal (client and raft traffic, both
// ways), AddLatency (replies and raft messages), and, with Options.Clock,
// SetClockOffset (wall clock) and AdvanceMonotonic (monotonic clock). etcd
// is a Go program and reads the time through the vDSO, not the C library,
// so the clock shim hands it a vDSO of its own; see EtcdNode.SetClockOffset
// for what each clock moves in etcd. Bed.EtcdLeader names the leader a
// majority follows. The package reaches the members through etcd's HTTP
// JSON gateway and links neither etcd's client nor gRPC; clients of the
// members come from devtools/testbed/etcdbed.
//
// The package does not import testing, so commands and benchmarks that start
// a bed do not link the test framework: use New and Close. Tests use
// devtools/testbed/bedtest, whose Start registers the cleanup on t.
package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Provider names accepted by Options.Provider and QUORUMLOCK_TESTBED.
const (
	ProviderDocker = "docker"
	ProviderLocal  = "local"
	ProviderAuto   = "auto"
)

// Environment variables read by the bed.
const (
	EnvProvider      = "QUORUMLOCK_TESTBED"
	EnvRedisImage    = "QUORUMLOCK_REDIS_IMAGE"
	EnvEtcdImage     = "QUORUMLOCK_ETCD_IMAGE"
	EnvPostgresImage = "QUORUMLOCK_POSTGRES_IMAGE"
)

// Default images for the docker provider, used when the environment names
// none. etcd has no default from a registry: the bed runs the member's
// binary as "etcd" on the image's PATH and preloads the clock shim into it,
// which needs a dynamically linked etcd such as Debian's; `make images`
// builds this one.
const (
	DefaultRedisImage    = "redis:7"
	DefaultEtcdImage     = "quorumlock/etcd:bookworm"
	DefaultPostgresImage = "postgres:15"
)

// Postgres credentials used by both providers.
const (
	PostgresUser     = "quorumlock"
	PostgresPassword = "quorumlock"
	PostgresDB       = "quorumlock"
)

// ErrNoProvider is returned when no provider can start the bed.
var ErrNoProvider = errors.New("testbed: no provider available")

// Fsync policies for Options.AppendFsync.
const (
	FsyncAlways   = "always"
	FsyncEverySec = "everysec"
	FsyncOff      = "off"
)

// Options says what to start.
type Options struct {
	// Redis is the number of independent Redis masters (0 for none).
	Redis int
	// Etcd is the number of members of one etcd cluster (0 for none): an
	// odd number, 3 normally.
	Etcd int
	// Postgres starts one Postgres server when true.
	Postgres bool
	// Provider is docker, local or auto. Empty means $QUORUMLOCK_TESTBED, or auto.
	Provider string
	// AppendFsync is the Redis AOF policy: always (the default, so a killed
	// node that restarts with its data has every acknowledged write),
	// everysec (RedisNode.KillLosingTail then models the writes a crash
	// loses), or off (no AOF: a restarted node comes back empty).
	AppendFsync string
	// StartTimeout bounds the start of each server (default 60s).
	StartTimeout time.Duration
	// Clock preloads a clock shim into every Redis server and etcd member,
	// so that RedisNode.SetClockOffset, EtcdNode.SetClockOffset and
	// EtcdNode.AdvanceMonotonic can move their clocks. The bed builds the
	// shim from C source when it starts, so this needs a C compiler (cc,
	// gcc or clang) on this machine.
	Clock bool
}

func (o Options) withDefaults() (Options, error) {
	if o.Redis < 0 {
		return o, fmt.Errorf("testbed: Options.Redis is %d, want 0 or more", o.Redis)
	}
	if o.Etcd < 0 || o.Etcd%2 == 0 && o.Etcd != 0 {
		return o, fmt.Errorf("testbed: Options.Etcd is %d, want 0 or an odd number (3 normally)", o.Etcd)
	}
	if o.Redis == 0 && o.Etcd == 0 && !o.Postgres {
		return o, errors.New("testbed: Options asks for nothing: set Redis > 0, Etcd > 0 or Postgres")
	}
	if o.Provider == "" {
		o.Provider = os.Getenv(EnvProvider)
	}
	if o.Provider == "" {
		o.Provider = ProviderAuto
	}
	switch o.Provider {
	case ProviderDocker, ProviderLocal, ProviderAuto:
	default:
		return o, fmt.Errorf("testbed: unknown provider %q: want docker, local or auto (%s)", o.Provider, EnvProvider)
	}
	switch o.AppendFsync {
	case "":
		o.AppendFsync = FsyncAlways
	case FsyncAlways, FsyncEverySec, FsyncOff:
	default:
		return o, fmt.Errorf("testbed: unknown AppendFsync %q: want always, everysec or off", o.AppendFsync)
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 60 * time.Second
	}
	return o, nil
}

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
