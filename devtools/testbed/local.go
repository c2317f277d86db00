package testbed

import (
	"errors"
	"os"
)

// localProvider runs redis-server, etcd and postgres processes on loopback.
type localProvider struct {
	tmp string
}

func newLocalProvider(opts Options) (*localProvider, error) {
	p := &localProvider{}
	var errs []error
	if opts.Redis > 0 {
		if _, err := lookPath("redis-server"); err != nil {
			errs = append(errs, err)
		}
	}
	if opts.Etcd > 0 {
		if _, err := lookPath("etcd"); err != nil {
			errs = append(errs, err)
		}
	}
	if opts.Postgres {
		for _, name := range []string{"initdb", "postgres"} {
			if _, err := lookPath(name); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "quorumlock-bed-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	p.tmp = dir
	return p, nil
}

func (p *localProvider) name() string { return ProviderLocal }

func (p *localProvider) dir() string { return p.tmp }

func (p *localProvider) hint() string {
	return "\nthe local provider needs redis-server, etcd and PostgreSQL from the machine's packages: run `make deps`" +
		" (as root: apt-get install -y redis-server etcd-server postgresql)"
}

func (p *localProvider) close() error { return os.RemoveAll(p.tmp) }
