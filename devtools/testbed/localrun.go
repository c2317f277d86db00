package testbed

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// localRunner runs a server as a process of this machine, on loopback.
type localRunner struct {
	bin   string
	srv   server
	runAs *user.User // nil: as this process's user

	mu       sync.Mutex
	prepared bool
	logFrom  int64 // where the current start's lines begin in the log
	proc     *proc
}

// runner finds srv's binary. A server that preloads the clock shim needs a
// dynamically linked one; as root, a server with a user runs as it.
func (p *localProvider) runner(srv server) (runner, error) {
	bin, err := lookPath(srv.binary())
	if err != nil {
		return nil, err
	}
	if len(srv.binds) > 0 {
		if err := checkDynamic(bin); err != nil {
			return nil, fmt.Errorf("Options.Clock: %w", err)
		}
	}
	r := &localRunner{bin: bin, srv: srv}
	if srv.user != "" && os.Geteuid() == 0 {
		u, err := user.Lookup(srv.user)
		if err != nil {
			return nil, fmt.Errorf("running as root needs the %s OS user (it comes with the server's package): %w", srv.user, err)
		}
		r.runAs = u
	}
	return r, nil
}

// checkDynamic fails for a statically linked binary, which ignores
// LD_PRELOAD and so the clock shim.
func checkDynamic(bin string) error {
	f, err := elf.Open(bin)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return nil
		}
	}
	return fmt.Errorf("%s is statically linked, so the clock shim cannot be preloaded into it (Debian's etcd-server is dynamically linked): %w",
		bin, errors.ErrUnsupported)
}

func (r *localRunner) logPath() string { return filepath.Join(r.srv.dir, r.srv.kind+".log") }

func (r *localRunner) start(ctx context.Context, ports []int, mode dataMode) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc != nil {
		r.proc.stop(syscall.SIGKILL, 0)
	}
	if !r.prepared {
		if err := r.prepare(ctx); err != nil {
			return nil, err
		}
		r.prepared = true
	}
	r.logFrom = 0
	if fi, err := os.Stat(r.logPath()); err == nil {
		r.logFrom = fi.Size()
	}
	pr, err := startProc(append([]string{r.bin}, r.srv.args(ports, mode)...), r.srv.env, r.logPath(), r.runAs)
	if err != nil {
		return nil, err
	}
	r.proc = pr
	addrs := make([]string, len(ports))
	for i, port := range ports {
		addrs[i] = loopback(port)
	}
	return addrs, nil
}

// prepare hands the node's directory to the server's user and runs its
// setup command to completion.
func (r *localRunner) prepare(ctx context.Context) error {
	if r.runAs != nil {
		if err := chownAll(r.srv.dir, r.runAs); err != nil {
			return err
		}
	}
	if r.srv.setup == nil {
		return nil
	}
	bin, err := lookPath(r.srv.setup[0])
	if err != nil {
		return err
	}
	pr, err := startProc(append([]string{bin}, r.srv.setup[1:]...), nil, r.logPath(), r.runAs)
	if err != nil {
		return err
	}
	select {
	case <-pr.done:
		if pr.err != nil {
			return fmt.Errorf("%s: %v\n%s", r.srv.setup[0], pr.err, tail(r.logPath(), 1500))
		}
		return nil
	case <-ctx.Done():
		pr.stop(syscall.SIGKILL, 0)
		return fmt.Errorf("%s: %w", r.srv.setup[0], ctx.Err())
	}
}

// chownAll gives dir and everything under it to u.
func chownAll(dir string, u *user.User) error {
	cred, err := credential(u)
	if err != nil {
		return err
	}
	return filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(path, int(cred.Uid), int(cred.Gid))
	})
}

func (r *localRunner) current() (*proc, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil || r.proc.exited() {
		return nil, fmt.Errorf("%s is not running", r.srv.binary())
	}
	return r.proc, nil
}

func (r *localRunner) exited(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil || !r.proc.exited() {
		return nil
	}
	return fmt.Errorf("%s exited: %v", r.srv.binary(), r.proc.err)
}

func (r *localRunner) log(max int) string {
	r.mu.Lock()
	from := r.logFrom
	r.mu.Unlock()
	return strings.TrimSpace(tailFrom(r.logPath(), from, max))
}

func (r *localRunner) pause(ctx context.Context) error {
	p, err := r.current()
	if err != nil {
		return err
	}
	return p.pause(ctx)
}

func (r *localRunner) resume(context.Context) error {
	p, err := r.current()
	if err != nil {
		return err
	}
	return p.signal(syscall.SIGCONT)
}

func (r *localRunner) kill(context.Context) error {
	if p, err := r.current(); err == nil {
		p.stop(syscall.SIGKILL, 0)
	}
	return nil
}

func (r *localRunner) close(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc != nil {
		r.proc.stop(r.srv.stop, 10*time.Second)
	}
	return nil
}
