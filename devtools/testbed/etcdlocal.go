package testbed

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// localEtcd is one etcd process.
type localEtcd struct {
	bin string
	cfg etcdConfig

	mu    sync.Mutex
	ports [2]int // client, peer
	proc  *proc
}

func (p *localProvider) newEtcd(_ context.Context, cfg etcdConfig) (etcdBackend, error) {
	if cfg.clock != nil {
		if err := checkDynamic(p.etcdBin); err != nil {
			return nil, fmt.Errorf("Options.Clock: %w", err)
		}
	}
	return &localEtcd{bin: p.etcdBin, cfg: cfg, ports: cfg.ports}, nil
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

// start runs etcd on its ports, or on new ones when they were taken since
// (etcd exits at once when it cannot bind).
func (e *localEtcd) start(ctx context.Context) (etcdAddrs, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	logPath := filepath.Join(e.cfg.dir, "etcd.log")
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		if attempt > 0 {
			ports, err := freePorts(2)
			if err != nil {
				return etcdAddrs{}, err
			}
			e.ports = [2]int{ports[0], ports[1]}
		}
		addrs := etcdAddrs{client: loopback(e.ports[0]), peer: loopback(e.ports[1])}
		pr, err := startProc(append([]string{e.bin}, e.cfg.args(e.ports[0], e.ports[1])...), e.cfg.env(), logPath, nil)
		if err != nil {
			return etcdAddrs{}, err
		}
		alive := func(context.Context) error {
			if pr.exited() {
				return fmt.Errorf("etcd exited: %v", pr.err)
			}
			return nil
		}
		if err = waitListening(ctx, alive, addrs.client, addrs.peer); err == nil {
			e.proc = pr
			return addrs, nil
		}
		pr.stop(syscall.SIGKILL, 0)
		log := tail(logPath, 1500)
		last = fmt.Errorf("%s: %w\n%s", e.cfg.name, err, log)
		if ctx.Err() != nil || !strings.Contains(log, "address already in use") {
			break
		}
	}
	return etcdAddrs{}, last
}

func (e *localEtcd) current() (*proc, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.proc == nil || e.proc.exited() {
		return nil, errors.New("etcd is not running")
	}
	return e.proc, nil
}

func (e *localEtcd) pause(context.Context) error {
	p, err := e.current()
	if err != nil {
		return err
	}
	return p.signal(syscall.SIGSTOP)
}

func (e *localEtcd) resume(context.Context) error {
	p, err := e.current()
	if err != nil {
		return err
	}
	return p.signal(syscall.SIGCONT)
}

func (e *localEtcd) kill(context.Context) error {
	if p, err := e.current(); err == nil {
		p.stop(syscall.SIGKILL, 0)
	}
	return nil
}

func (e *localEtcd) close(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.proc != nil {
		e.proc.stop(syscall.SIGKILL, 0)
	}
	return nil
}
