package testbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// pghaProvider is a provider that runs the group's members: the local
// one (a process tree per member) and the docker one (a container per
// member).
type pghaProvider interface {
	provider
	// pghaSetup prepares the group's directory dir, which exists, and
	// returns the group's programs as its services see them and the OS user
	// they run as (nil: the bed's own).
	pghaSetup(ctx context.Context, dir string) (pghaBins, *user.User, error)
	// pghaRunner returns what runs the service of member srv, whose one
	// port is port, as runAs.
	pghaRunner(srv server, port int, runAs *user.User) (pghaRunner, error)
}

// pghaRunner runs a member's pg_autoctl service, and the member's other
// commands, on one provider. Its faults act on the whole service: keeper,
// Postgres and its backends.
type pghaRunner interface {
	runner
	// exec runs argv to completion as the member's user and in its
	// environment, with its output in the member's log: inside the
	// member's service when it runs (pg_ctl promote signals its Postgres),
	// on its own otherwise.
	exec(ctx context.Context, argv ...string) error
	// reload sends SIGHUP to the service, which has its keeper reload its
	// configuration.
	reload(ctx context.Context) error
	// freezeKeeper stops the service's pg_autoctl processes (SIGSTOP), not
	// its Postgres, and returns once they are stopped.
	freezeKeeper(ctx context.Context) error
}

// pghaSetup finds the machine's programs and, when the bed runs as root,
// the postgres user the services run as (PostgreSQL refuses root).
func (p *localProvider) pghaSetup(_ context.Context, _ string) (pghaBins, *user.User, error) {
	bins, err := findPGHABins()
	if err != nil || os.Geteuid() != 0 {
		return bins, nil, err
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return bins, nil, fmt.Errorf("running as root needs the postgres OS user (it comes with PostgreSQL's package): %w", err)
	}
	return bins, u, nil
}

// pghaRunner runs the service as a process tree of this machine.
func (p *localProvider) pghaRunner(srv server, port int, _ *user.User) (pghaRunner, error) {
	run, err := p.runner(srv)
	if err != nil {
		return nil, err
	}
	lr, ok := run.(*localRunner)
	if !ok {
		return nil, fmt.Errorf("%s: not a local process: %w", srv.name, errors.ErrUnsupported)
	}
	return &treeRunner{localRunner: lr, port: port}, nil
}

// treeRunner runs a pg_autoctl service as a local process and sends its
// faults to the whole process tree: pg_autoctl supervises a keeper and a
// Postgres postmaster, whose backends each call setsid, so neither the
// process nor its process group reaches them all. Pause, Resume, Kill and
// close act on the service and every process below it.
type treeRunner struct {
	*localRunner
	// port is the one port the service listens on: it is written in
	// pg_autoctl's configuration and registered with the monitor, so a
	// start on other ports is not possible.
	port int
}

func (r *treeRunner) start(ctx context.Context, _ []int, mode dataMode) ([]string, error) {
	if err := r.killTree(ctx); err != nil {
		return nil, err
	}
	return r.localRunner.start(ctx, []int{r.port}, mode)
}

func (r *treeRunner) pause(ctx context.Context) error {
	p, err := r.current()
	if err != nil {
		return err
	}
	_, err = freezeTree(ctx, p.cmd.Process.Pid)
	return err
}

func (r *treeRunner) resume(context.Context) error {
	p, err := r.current()
	if err != nil {
		return err
	}
	pids, err := descendants(p.cmd.Process.Pid)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	return err
}

func (r *treeRunner) kill(ctx context.Context) error { return r.killTree(ctx) }

// exec runs argv as a process of this machine. When ctx ends first, the
// command and every process it started are killed.
func (r *treeRunner) exec(ctx context.Context, argv ...string) error {
	logPath := r.logPath()
	pr, err := startProc(argv, r.srv.env, logPath, r.runAs)
	if err != nil {
		return err
	}
	what := filepath.Base(argv[0]) + " " + strings.Join(argv[1:min(3, len(argv))], " ")
	select {
	case <-pr.done:
		if pr.err != nil {
			return fmt.Errorf("%s: %w\n%s", what, pr.err, tail(logPath, 3000))
		}
		return nil
	case <-ctx.Done():
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		k := &treeRunner{localRunner: &localRunner{proc: pr, srv: r.srv}}
		return errors.Join(fmt.Errorf("%s: %w\n%s", what, ctx.Err(), tail(logPath, 3000)), k.killTree(kctx))
	}
}

// reload sends SIGHUP to the service's process, which passes it on to
// the keeper.
func (r *treeRunner) reload(context.Context) error {
	p, err := r.current()
	if err != nil {
		return err
	}
	return p.signal(syscall.SIGHUP)
}

// freezeKeeper sends SIGSTOP to the processes of the service's tree that
// run pg_autoctl.
func (r *treeRunner) freezeKeeper(ctx context.Context) error {
	p, err := r.current()
	if err != nil {
		return err
	}
	tree, err := descendants(p.cmd.Process.Pid)
	if err != nil {
		return err
	}
	var keeper []int
	for _, pid := range tree {
		if comm, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm")); err == nil && strings.TrimSpace(string(comm)) == kindAutoctl {
			_ = syscall.Kill(pid, syscall.SIGSTOP)
			keeper = append(keeper, pid)
		}
	}
	return waitStopped(ctx, keeper)
}

// close kills the tree: the bed throws the group's data away, so nothing
// is gained by a clean shutdown.
func (r *treeRunner) close(ctx context.Context) error {
	err := r.killTree(ctx)
	return errors.Join(err, r.localRunner.close(ctx))
}

// killTree freezes the service's tree, so that no process forks or
// restarts another, sends SIGKILL to all of it, and waits until every
// process has ended and the service has been reaped. It also kills the
// processes that name the service's data directory on their command line
// and their trees: a Postgres or a pg_autoctl service left behind by one
// that died, which no longer sits under it.
func (r *treeRunner) killTree(ctx context.Context) error {
	r.mu.Lock()
	p := r.proc
	r.mu.Unlock()
	var roots []int
	if p != nil && !p.exited() {
		roots = append(roots, p.cmd.Process.Pid)
	}
	strays, err := namingDir(r.srv.dataDir())
	roots = append(roots, strays...)
	var all []int
	for _, root := range roots {
		if slices.Contains(all, root) {
			continue
		}
		pids, ferr := freezeTree(ctx, root)
		err = errors.Join(err, ferr)
		all = append(all, pids...)
	}
	for _, pid := range all {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if p != nil {
		p.stop(syscall.SIGKILL, 0)
	}
	return errors.Join(err, waitGone(ctx, all))
}

// namingDir returns the processes whose command line holds dir, an
// absolute path (a relative one matches nothing).
func namingDir(dir string) ([]int, error) {
	if !filepath.IsAbs(dir) {
		return nil, nil
	}
	cmds, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, c := range cmds {
		b, err := os.ReadFile(c)
		if err != nil || !bytes.Contains(b, []byte(dir)) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(c))); err == nil && pid != os.Getpid() {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// procStat is what /proc/<pid>/stat says of a process: its state letter
// and its parent.
type procStat struct {
	state byte
	ppid  int
}

// readStat reads /proc/<pid>/stat.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	// The command name is in parentheses and may hold spaces: the fields
	// after the last ')' are "state ppid ...".
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: unreadable: %q", pid, b)
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 2 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: unreadable: %q", pid, b)
	}
	ppid, err := strconv.Atoi(string(f[1]))
	if err != nil {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return procStat{state: f[0][0], ppid: ppid}, nil
}

// descendants returns root and every process below it, from one reading of
// /proc.
func descendants(root int) ([]int, error) {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return nil, err
	}
	children := make(map[int][]int, len(dirs))
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		st, err := readStat(pid)
		if err != nil {
			continue // it has ended since the listing
		}
		children[st.ppid] = append(children[st.ppid], pid)
	}
	tree := []int{root}
	for i := 0; i < len(tree); i++ {
		tree = append(tree, children[tree[i]]...)
	}
	return tree, nil
}

// freezeTree sends SIGSTOP to root and its descendants until a reading of
// /proc finds no process it has not stopped, and waits until each one is
// stopped: a stopped process forks nothing, so the tree it returns is the
// whole tree, frozen.
func freezeTree(ctx context.Context, root int) ([]int, error) {
	var frozen []int
	for range 100 {
		tree, err := descendants(root)
		if err != nil {
			return frozen, err
		}
		fresh := 0
		for _, pid := range tree {
			if !slices.Contains(frozen, pid) {
				_ = syscall.Kill(pid, syscall.SIGSTOP)
				frozen = append(frozen, pid)
				fresh++
			}
		}
		if err := waitStopped(ctx, frozen); err != nil {
			return frozen, err
		}
		if fresh == 0 {
			return frozen, nil
		}
	}
	return frozen, fmt.Errorf("process %d: its tree kept growing while it was being stopped", root)
}

// waitStopped waits until every process of pids is stopped or has ended,
// for up to 5 s.
func waitStopped(ctx context.Context, pids []int) error {
	return pollProcs(ctx, pids, "stop", func(st procStat) bool {
		return st.state == 'T' || st.state == 't' || st.state == 'Z' || st.state == 'X'
	})
}

// waitGone waits until every process of pids has ended (a zombie counts:
// it holds nothing but its entry), for up to 5 s.
func waitGone(ctx context.Context, pids []int) error {
	return pollProcs(ctx, pids, "end", func(st procStat) bool { return st.state == 'Z' || st.state == 'X' })
}

// pollProcs polls /proc until done holds for every process of pids that
// still exists.
func pollProcs(ctx context.Context, pids []int, what string, done func(procStat) bool) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		left := 0
		for _, pid := range pids {
			if st, err := readStat(pid); err == nil && !done(st) {
				left = pid
				break
			}
		}
		if left == 0 {
			return nil
		}
		if err := sleepCtx(ctx, 2*time.Millisecond); err != nil {
			return fmt.Errorf("process %d did not %s: %w", left, what, err)
		}
	}
}
