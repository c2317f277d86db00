package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
)

// provider starts servers on one kind of host: docker or local.
type provider interface {
	name() string
	// hint says how to fix a failed start.
	hint() string
	// dir is the provider's temporary directory on this machine, removed
	// by close: the nodes' data, snapshots and clock files live under it.
	dir() string
	// runner returns what runs srv's process or container.
	runner(srv server) (runner, error)
	close() error
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
