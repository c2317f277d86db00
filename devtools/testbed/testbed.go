// Package testbed starts real Redis masters, a real etcd cluster, a real
// Postgres and a Postgres HA group for tests and demos, and injects faults
// into them.
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
//     `make images` builds local ones from Debian packages. Redis and etcd
//     containers use the host's network, on free loopback ports, with
//     their directories bind-mounted at the same paths, so they start as
//     the local processes do and etcd's peer traffic crosses the same
//     proxies; this needs an engine on this machine. Postgres runs the
//     image's own way, on a published port. The members of the Postgres
//     HA group run pg_autoctl from the Postgres image in the host's
//     network too, one container each.
//   - local: redis-server, etcd and postgres processes from the machine's
//     packages (Debian's etcd-server for etcd), on free loopback ports,
//     with their data in a temporary directory.
//
// QUORUMLOCK_TESTBED=docker|local|auto chooses; auto (the default) takes
// docker when the engine answers and the images the bed runs exist (the
// etcd image only for a bed with etcd; for a bed with a Postgres HA group,
// a Postgres image with pg_auto_failover), else local. A provider that cannot
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
// With Options.PostgresHA, on both providers, the bed also runs a Postgres
// HA group (PostgresGroup): a pg_auto_failover monitor and two data nodes,
// a primary and a synchronous standby, whose multi-host URI reaches
// whichever is the primary. Each data node sits behind a proxy whose
// address it registers with the monitor, so clients, replication and the
// monitor's health checks all cross it. Its nodes have Pause/Resume,
// Kill/Restart (the whole pg_autoctl service: keeper, Postgres and its
// backends), Partition/Heal (from clients, the monitor and the other node)
// and AddLatency; the group has Switchover, and tells which node is the
// primary. Failover timeouts are short by default: a killed primary is
// replaced within about 13 s (FastPostgresHATimeouts).
//
// One node type holds the lifecycle of every server (start, pause,
// resume, kill, restart with or without data), its state and its
// addresses; a server description says what each server runs (command
// line, image form, data directory, readiness probe), and a runner per
// provider runs it as a process or a container.
//
// The package does not import testing, so commands and benchmarks that start
// a bed do not link the test framework: use New and Close. Tests use
// devtools/testbed/bedtest, whose Start registers the cleanup on t.
package testbed

import (
	"errors"
	"fmt"
	"os"
	"time"
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
	// PostgresHA starts a Postgres HA group when true: a pg_auto_failover
	// monitor, a primary and a synchronous standby (see PostgresGroup).
	// It runs on both providers; on docker, the Postgres image must have
	// pg_auto_failover (the one `make images` builds has it). auto picks
	// local for a bed with the group while local processes can run it
	// (the failover suites were measured and tuned there), else docker.
	PostgresHA bool
	// PostgresHATimeouts are the group's failover settings; nil takes
	// FastPostgresHATimeouts.
	PostgresHATimeouts *PostgresHATimeouts
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
	if o.Redis == 0 && o.Etcd == 0 && !o.Postgres && !o.PostgresHA {
		return o, errors.New("testbed: Options asks for nothing: set Redis > 0, Etcd > 0, Postgres or PostgresHA")
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
	if o.PostgresHA && o.Provider == ProviderAuto {
		if _, err := findPGHABins(); err == nil {
			o.Provider = ProviderLocal
		}
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
