package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// localProvider runs redis-server, etcd and postgres processes on loopback.
type localProvider struct {
	redisBin string
	etcdBin  string
	tmp      string
}

func newLocalProvider(opts Options) (*localProvider, error) {
	p := &localProvider{}
	var errs []error
	if opts.Redis > 0 {
		bin, err := lookPath("redis-server")
		if err != nil {
			errs = append(errs, err)
		}
		p.redisBin = bin
	}
	if opts.Etcd > 0 {
		bin, err := lookPath("etcd")
		if err != nil {
			errs = append(errs, err)
		}
		p.etcdBin = bin
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

// localRedis is one redis-server process.
type localRedis struct {
	bin string
	cfg redisConfig

	mu   sync.Mutex
	port int
	proc *proc
}

func (p *localProvider) newRedis(_ context.Context, cfg redisConfig) (redisBackend, error) {
	return &localRedis{bin: p.redisBin, cfg: cfg}, nil
}

func (r *localRedis) start(ctx context.Context, mode dataMode) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	data := r.cfg.dataDir()
	if mode == dataWipe {
		if err := resetDir(data); err != nil {
			return "", err
		}
	}
	var env []string
	if c := r.cfg.clock; c != nil {
		env = append(env, "LD_PRELOAD="+c.shim, clockFileEnv+"="+c.offset)
	}
	logPath := filepath.Join(r.cfg.dir, "redis.log")
	// The first start takes a free port; later starts keep it, so the
	// proxy in front never changes its upstream. A port taken by someone
	// else between the probe and the bind is retried with another.
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		if r.port == 0 || attempt > 0 {
			port, err := freePort()
			if err != nil {
				return "", err
			}
			r.port = port
		}
		args := []string{r.bin,
			"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--protected-mode", "no",
			"--dir", data, "--save", "", "--daemonize", "no", "--logfile", "",
		}
		args = append(args, aofArgs(r.cfg.opts.AppendFsync, mode)...)
		pr, err := startProc(args, env, logPath, nil)
		if err != nil {
			return "", err
		}
		addr := "127.0.0.1:" + strconv.Itoa(r.port)
		// A bind failure makes the process exit at once.
		if err := sleepCtx(ctx, 30*time.Millisecond); err != nil {
			pr.stop(syscall.SIGKILL, 0)
			return "", err
		}
		if !pr.exited() {
			r.proc = pr
			return addr, nil
		}
		last = fmt.Errorf("redis-server on %s exited: %v\n%s", addr, pr.err, tail(logPath, 800))
	}
	return "", last
}

func (r *localRedis) current() (*proc, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil || r.proc.exited() {
		return nil, errors.New("redis-server is not running")
	}
	return r.proc, nil
}

func (r *localRedis) pause(context.Context) error {
	p, err := r.current()
	if err != nil {
		return err
	}
	return p.signal(syscall.SIGSTOP)
}

func (r *localRedis) resume(context.Context) error {
	p, err := r.current()
	if err != nil {
		return err
	}
	return p.signal(syscall.SIGCONT)
}

func (r *localRedis) kill(context.Context) error {
	p, err := r.current()
	if err != nil {
		return nil
	}
	p.stop(syscall.SIGKILL, 0)
	return nil
}

func (r *localRedis) close(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc != nil {
		r.proc.stop(syscall.SIGKILL, 0)
	}
	return nil
}

// startPostgres runs initdb into a temporary directory and starts postgres on
// a free loopback port. As root it runs both as the postgres user, since
// PostgreSQL refuses to run as root.
func (p *localProvider) startPostgres(ctx context.Context, opts Options) (*PostgresNode, error) {
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	initdb, _ := lookPath("initdb")
	server, _ := lookPath("postgres")
	var runAs *user.User
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root needs the postgres OS user (it comes with the postgresql package): %w", err)
		}
		runAs = u
	}
	dir := filepath.Join(p.tmp, "postgres")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	pwfile := filepath.Join(dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(PostgresPassword+"\n"), 0o600); err != nil {
		return nil, err
	}
	if runAs != nil {
		cred, err := credential(runAs)
		if err != nil {
			return nil, err
		}
		for _, f := range []string{dir, pwfile} {
			if err := os.Chown(f, int(cred.Uid), int(cred.Gid)); err != nil {
				return nil, err
			}
		}
	}
	data := filepath.Join(dir, "data")
	logPath := filepath.Join(dir, "postgres.log")
	ip, err := startProc([]string{initdb, "-D", data, "-U", PostgresUser, "--pwfile=" + pwfile,
		"-A", "scram-sha-256", "-E", "UTF8", "--locale=C", "--no-sync"}, nil, logPath, runAs)
	if err != nil {
		return nil, err
	}
	select {
	case <-ip.done:
		if ip.err != nil {
			return nil, fmt.Errorf("initdb: %v\n%s", ip.err, tail(logPath, 1500))
		}
	case <-ctx.Done():
		ip.stop(syscall.SIGKILL, 0)
		return nil, fmt.Errorf("initdb: %w", ctx.Err())
	}
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		pr, err := startProc([]string{server, "-D", data, "-p", strconv.Itoa(port), "-k", dir,
			"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300"}, nil, logPath, runAs)
		if err != nil {
			return nil, err
		}
		node := &PostgresNode{host: "127.0.0.1", port: port}
		node.stopServer = func(context.Context) error {
			pr.stop(syscall.SIGQUIT, 10*time.Second)
			return nil
		}
		if err := node.waitReady(ctx, pr.done); err != nil {
			pr.stop(syscall.SIGKILL, 0)
			last = fmt.Errorf("%w\n%s", err, tail(logPath, 1500))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		if err := node.createMainDB(ctx); err != nil {
			pr.stop(syscall.SIGKILL, 0)
			return nil, err
		}
		return node, nil
	}
	return nil, last
}
