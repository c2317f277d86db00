package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// provider starts servers of one kind.
type provider interface {
	name() string
	// hint says how to fix a failed start.
	hint() string
	// dir is the provider's temporary directory on this machine, removed
	// by close: the nodes' data, snapshots and clock files live under it.
	dir() string
	newRedis(ctx context.Context, cfg redisConfig) (redisBackend, error)
	newEtcd(ctx context.Context, cfg etcdConfig) (etcdBackend, error)
	startPostgres(ctx context.Context, opts Options) (*PostgresNode, error)
	close() error
}

// redisConfig is what a provider needs to create one Redis backend.
type redisConfig struct {
	opts Options
	// dir is the node's own directory on this machine; the server's data
	// directory is dir/data, whatever the provider.
	dir string
	// clock is the clock shim to preload into the server, or nil without
	// Options.Clock.
	clock *clockFiles
}

// dataDir is the server's data directory on this machine.
func (c redisConfig) dataDir() string { return filepath.Join(c.dir, "data") }

// dataMode says what a start does with the node's data directory.
type dataMode int

const (
	// dataWipe starts the server empty.
	dataWipe dataMode = iota
	// dataKeep starts it with what it had persisted, by the bed's policy.
	dataKeep
	// dataRDB starts it with appendonly no, so that it loads the dump.rdb
	// its data directory holds (Redis ignores an RDB while appendonly is
	// yes); the caller turns the AOF on once it has loaded.
	dataRDB
)

// redisBackend is one Redis server process or container, without the proxy.
type redisBackend interface {
	// start starts the server, with its data directory as mode says, and
	// returns the host:port it listens on.
	start(ctx context.Context, mode dataMode) (string, error)
	pause(ctx context.Context) error
	resume(ctx context.Context) error
	kill(ctx context.Context) error
	close(ctx context.Context) error
}

// etcdBackend is one etcd member's process or container, without its
// proxies.
type etcdBackend interface {
	// start starts the member with the data its directory holds and
	// returns the host:port addresses it listens on for clients and peers.
	// It returns once both accept connections, which is before the
	// member has joined a quorum.
	start(ctx context.Context) (etcdAddrs, error)
	pause(ctx context.Context) error
	resume(ctx context.Context) error
	kill(ctx context.Context) error
	close(ctx context.Context) error
}

// etcdAddrs are the addresses an etcd member listens on.
type etcdAddrs struct {
	client string
	peer   string
}

// choose picks the provider that opts asks for.
func choose(ctx context.Context, opts Options) (provider, error) {
	switch opts.Provider {
	case ProviderDocker:
		return newDockerProvider(ctx, opts)
	case ProviderLocal:
		return newLocalProvider(opts)
	}
	dp, derr := newDockerProvider(ctx, opts)
	if derr == nil {
		return dp, nil
	}
	lp, lerr := newLocalProvider(opts)
	if lerr == nil {
		return lp, nil
	}
	return nil, fmt.Errorf("%w:\n  docker: %v\n  local: %v\nfix one of them: `make images` (docker, no registry needed) or `make deps` (local redis-server and postgres)",
		ErrNoProvider, derr, lerr)
}

// lookPath finds a server binary, also in the PostgreSQL version directories
// that Debian does not put on PATH.
func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, v := range []string{"17", "16", "15", "14", "13"} {
		p := "/usr/lib/postgresql/" + v + "/bin/" + name
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found on PATH: %w", name, errors.ErrUnsupported)
}
