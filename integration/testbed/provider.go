package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
)

// provider starts servers of one kind.
type provider interface {
	name() string
	// hint says how to fix a failed start.
	hint() string
	newRedis(ctx context.Context, index int, opts Options) (redisBackend, error)
	startPostgres(ctx context.Context, opts Options) (*PostgresNode, error)
	close() error
}

// redisBackend is one Redis server process or container, without the proxy.
type redisBackend interface {
	// start starts the server, empty or with the data it had, and returns
	// the host:port it listens on.
	start(ctx context.Context, keepData bool) (string, error)
	pause(ctx context.Context) error
	resume(ctx context.Context) error
	kill(ctx context.Context) error
	close(ctx context.Context) error
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
