//go:build !nodocker

package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
)

// pghaDockerUID is the user and group id the group's containers run as
// when the bed runs as root on a machine without a postgres user: any
// unprivileged id does, for the passwd file the containers see names it.
const pghaDockerUID = "5432"

// logWrap runs "$@" with its output appended to the file "$0": the
// services' and the commands' output goes to the member's log, in its
// directory, as on the local provider.
const logWrap = `exec "$@" >>"$0" 2>&1`

// probePGHA checks, for a bed with a Postgres HA group, that the Postgres
// image has pg_auto_failover (the official postgres image has not; the one
// `make images` builds has), and finds its PostgreSQL: the directory of
// the newest version with the extension, in Debian's layout. It runs a
// container, about a second.
func (p *dockerProvider) probePGHA(ctx context.Context, opts Options) error {
	if !opts.PostgresHA {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	const script = `command -v pg_autoctl >/dev/null || exit 3
for f in /usr/lib/postgresql/*/lib/pgautofailover.so; do
	d=${f%/lib/*}/bin
	[ -x "$d/pg_ctl" ] && [ -x "$d/initdb" ] && bin=$d
done
[ -n "$bin" ] || exit 4
echo "$bin"`
	out, code, err := p.runOnce(ctx, testcontainers.ContainerRequest{
		Image: p.postgresImage, Entrypoint: []string{"/bin/sh", "-c", script},
	})
	if err != nil {
		return fmt.Errorf("image %s: look for pg_auto_failover: %w", p.postgresImage, err)
	}
	bin := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(bin, "/") {
		return fmt.Errorf("image %s has no pg_auto_failover (pg_autoctl and postgresql-*-auto-failover; exit status %d: %q): "+
			"the Postgres HA group needs it; `make images` builds one that has it: %w", p.postgresImage, code, out, errors.ErrUnsupported)
	}
	p.pghaBins = pghaBins{autoctl: kindAutoctl, pgctl: filepath.Join(bin, "pg_ctl"), initdb: filepath.Join(bin, "initdb")}
	return nil
}

// runOnce runs a container to its end and removes it, and returns its
// output and exit status. When ctx ends first, the container is removed.
func (p *dockerProvider) runOnce(ctx context.Context, req testcontainers.ContainerRequest) (string, int, error) {
	c, err := p.create(ctx, req)
	if err != nil {
		return "", 0, err
	}
	defer func() { _ = c.Terminate(context.WithoutCancel(ctx)) }()
	id := c.GetContainerID()
	for {
		running, err := p.running(ctx, id)
		if err != nil {
			return "", 0, err
		}
		if !running {
			break
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return "", 0, err
		}
	}
	st, err := p.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return "", 0, err
	}
	var out []byte
	if rc, err := c.Logs(ctx); err == nil {
		out, _ = io.ReadAll(io.LimitReader(rc, 1<<16))
		_ = rc.Close()
	}
	return string(out), st.Container.State.ExitCode, nil
}

// pghaSetup returns the image's programs and the user the members run as:
// the bed's own, or, as root, the machine's postgres user (a user of its
// own when there is none). The containers see that user through a passwd
// file in dir, so that the files they write belong to the bed or to that
// user, whatever the image's own users are.
func (p *dockerProvider) pghaSetup(_ context.Context, dir string) (pghaBins, *user.User, error) {
	if remoteEngine() {
		return pghaBins{}, nil, fmt.Errorf("%w (DOCKER_HOST=%q)", ErrRemoteEngine, os.Getenv("DOCKER_HOST"))
	}
	if p.pghaBins == (pghaBins{}) {
		return pghaBins{}, nil, errors.New("the docker provider did not look for pg_auto_failover in its image (Options.PostgresHA was not set)")
	}
	var runAs *user.User
	uid, gid, name := strconv.Itoa(os.Getuid()), strconv.Itoa(os.Getgid()), "postgres"
	if os.Geteuid() == 0 {
		runAs = &user.User{Uid: pghaDockerUID, Gid: pghaDockerUID, Username: name}
		if u, err := user.Lookup("postgres"); err == nil {
			runAs = u
		}
		uid, gid = runAs.Uid, runAs.Gid
	} else if u, err := user.Current(); err == nil {
		name = u.Username
	}
	passwd := "root:x:0:0:root:/root:/bin/sh\n" + name + ":x:" + uid + ":" + gid + ":" + name + ":" + dir + ":/bin/sh\n"
	if err := os.WriteFile(filepath.Join(dir, "passwd"), []byte(passwd), 0o644); err != nil {
		return pghaBins{}, nil, err
	}
	return p.pghaBins, runAs, nil
}

// pghaRunner runs the member's service as a container.
func (p *dockerProvider) pghaRunner(srv server, port int, runAs *user.User) (pghaRunner, error) {
	uid, gid := strconv.Itoa(os.Getuid()), strconv.Itoa(os.Getgid())
	if runAs != nil {
		uid, gid = runAs.Uid, runAs.Gid
	}
	r := &pghaDockerRunner{p: p, srv: srv, port: port, user: uid + ":" + gid, groupDir: filepath.Dir(srv.dir)}
	for _, kv := range srv.env {
		if dir, ok := strings.CutPrefix(kv, "PGHOST="); ok {
			r.sockDir = dir
		}
	}
	if r.sockDir == "" {
		return nil, fmt.Errorf("%s: no socket directory (PGHOST) in its environment", srv.name)
	}
	return r, nil
}

// pghaDockerRunner runs a member's pg_autoctl service as a container of
// the Postgres image, in the host's network namespace on the member's
// loopback port, as the local provider's process tree runs on it: the
// group's directory (every member's, and the socket directory) is
// bind-mounted at its path on this machine, so the bed reads and writes
// their files and reaches each Postgres through its socket as it does for
// local processes. docker-init is the container's first process, and
// passes signals on to the service.
//
// Kill is docker kill (SIGKILL: the service and everything under it end
// with the container), Pause docker pause (the cgroup freezer freezes
// every process), and every start runs a new container on the member's
// data. The member's other commands run with docker exec in its container
// while it runs (pg_ctl promote signals the postmaster by the pid it
// wrote, so it must run there), and each in a container of its own
// otherwise (initdb, pg_autoctl create monitor).
type pghaDockerRunner struct {
	p        *dockerProvider
	srv      server
	port     int
	user     string // uid:gid
	groupDir string // bind-mounted: every member's directory and sockDir
	sockDir  string // the group's socket directory

	mu      sync.Mutex
	c       *testcontainers.DockerContainer
	logFrom int64 // where the current start's lines begin in the log
}

func (r *pghaDockerRunner) logPath() string { return filepath.Join(r.srv.dir, r.srv.kind+".log") }

// request is a container running argv in the member's environment.
func (r *pghaDockerRunner) request(argv []string) testcontainers.ContainerRequest {
	env := make(map[string]string)
	for _, kv := range r.srv.env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	binds := []string{r.groupDir + ":" + r.groupDir, filepath.Join(r.groupDir, "passwd") + ":/etc/passwd:ro"}
	init := true
	return testcontainers.ContainerRequest{
		Image: r.p.postgresImage, Entrypoint: []string{"/bin/sh", "-c", logWrap, r.logPath()}, Cmd: argv, Env: env,
		ConfigModifier: func(c *container.Config) { c.User, c.WorkingDir = r.user, r.srv.dir },
		HostConfigModifier: func(hc *container.HostConfig) {
			hc.NetworkMode = "host"
			hc.Init = &init
			hc.Binds = append(hc.Binds, binds...)
		},
	}
}

func (r *pghaDockerRunner) start(ctx context.Context, _ []int, mode dataMode) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.removeLocked(ctx); err != nil {
		return nil, err
	}
	if err := r.removeStale(); err != nil {
		return nil, err
	}
	r.logFrom = 0
	if fi, err := os.Stat(r.logPath()); err == nil {
		r.logFrom = fi.Size()
	}
	c, err := r.p.create(ctx, r.request(append([]string{kindAutoctl}, r.srv.args([]int{r.port}, mode)...)))
	if err != nil {
		return nil, err
	}
	r.c = c
	return []string{loopback(r.port)}, nil
}

// removeStale removes the lock files that name the processes of the
// member's last container, which has ended: pg_autoctl's pidfile (under
// XDG_RUNTIME_DIR), Postgres's postmaster.pid and its socket's lock file.
// A new container numbers its processes from 1 again, so the process a
// stale file names is often alive there, the new service itself or
// another one, and pg_autoctl then refuses to start ("An instance of
// pg_autoctl is already running with PID 7"; seen in one run in two), as
// Postgres would ("lock file already exists").
func (r *pghaDockerRunner) removeStale() error {
	run := filepath.Join(r.srv.dir, "xdg", "run")
	ents, err := os.ReadDir(run)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var errs []error
	for _, e := range ents {
		errs = append(errs, os.RemoveAll(filepath.Join(run, e.Name())))
	}
	sock := filepath.Join(r.sockDir, ".s.PGSQL."+strconv.Itoa(r.port))
	for _, f := range []string{filepath.Join(r.srv.dataDir(), "postmaster.pid"), sock + ".lock", sock} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (r *pghaDockerRunner) removeLocked(ctx context.Context) error { return removeContainer(ctx, &r.c) }

func (r *pghaDockerRunner) container() (*testcontainers.DockerContainer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.c == nil {
		return nil, errors.New("no container")
	}
	return r.c, nil
}

func (r *pghaDockerRunner) exited(ctx context.Context) error {
	c, err := r.container()
	if err != nil {
		return err
	}
	if up, err := r.p.running(ctx, c.GetContainerID()); err != nil || !up {
		return errors.Join(fmt.Errorf("the %s container of %s exited", kindAutoctl, r.srv.name), err)
	}
	return nil
}

func (r *pghaDockerRunner) log(max int) string {
	r.mu.Lock()
	from := r.logFrom
	r.mu.Unlock()
	return strings.TrimSpace(tailFrom(r.logPath(), from, max))
}

func (r *pghaDockerRunner) pause(ctx context.Context) error {
	c, err := r.container()
	if err != nil {
		return err
	}
	_, err = r.p.cli.ContainerPause(ctx, c.GetContainerID(), client.ContainerPauseOptions{})
	return err
}

func (r *pghaDockerRunner) resume(ctx context.Context) error {
	c, err := r.container()
	if err != nil {
		return err
	}
	_, err = r.p.cli.ContainerUnpause(ctx, c.GetContainerID(), client.ContainerUnpauseOptions{})
	return err
}

func (r *pghaDockerRunner) kill(ctx context.Context) error {
	c, err := r.container()
	if err != nil {
		return nil // never started: nothing runs
	}
	return r.p.kill(ctx, c.GetContainerID())
}

// close removes the container, killing what runs in it: the bed throws
// the group's data away, so nothing is gained by a clean shutdown.
func (r *pghaDockerRunner) close(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.removeLocked(ctx)
}

// running returns the member's container while it runs, else nil.
func (r *pghaDockerRunner) running(ctx context.Context) (*testcontainers.DockerContainer, error) {
	c, err := r.container()
	if err != nil {
		return nil, nil
	}
	up, err := r.p.running(ctx, c.GetContainerID())
	if err != nil || !up {
		return nil, err
	}
	return c, nil
}

// exec runs argv in the member's running container, or in a container of
// its own. A command in the running container is bounded by ctx's deadline
// (timeout -s KILL), since docker cannot end an exec'd process.
func (r *pghaDockerRunner) exec(ctx context.Context, argv ...string) error {
	what := filepath.Base(argv[0]) + " " + strings.Join(argv[1:min(3, len(argv))], " ")
	c, err := r.running(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	code := 0
	if c == nil {
		_, code, err = r.p.runOnce(ctx, r.request(argv))
	} else {
		if d, ok := ctx.Deadline(); ok {
			secs := strconv.Itoa(max(1, int(time.Until(d).Seconds()+1)))
			argv = append([]string{"timeout", "-s", "KILL", secs}, argv...)
		}
		code, _, err = c.Exec(ctx, append([]string{"/bin/sh", "-c", logWrap, r.logPath()}, argv...))
	}
	if err == nil && code != 0 {
		err = fmt.Errorf("exit status %d", code)
	}
	if err != nil {
		return fmt.Errorf("%s: %w\n%s", what, err, tail(r.logPath(), 3000))
	}
	return nil
}

// reload sends SIGHUP to the container, whose first process passes it on
// to the service.
func (r *pghaDockerRunner) reload(ctx context.Context) error {
	c, err := r.container()
	if err != nil {
		return err
	}
	_, err = r.p.cli.ContainerKill(ctx, c.GetContainerID(), client.ContainerKillOptions{Signal: "HUP"})
	return err
}

// freezeScript, run in a member's container, sends SIGSTOP to its
// pg_autoctl processes and waits, up to about 5 s, until each one is
// stopped.
const freezeScript = `pids=
for d in /proc/[0-9]*; do
	read -r c 2>/dev/null <"$d/comm" || continue
	[ "$c" = pg_autoctl ] && pids="$pids ${d#/proc/}"
done
[ -n "$pids" ] || { echo "no pg_autoctl process runs" >&2; exit 1; }
kill -STOP $pids
i=0
while [ $i -lt 2500 ]; do
	left=
	for p in $pids; do
		read -r s 2>/dev/null </proc/$p/stat || continue
		s=${s##*) }
		case ${s%% *} in T|t|Z|X) ;; *) left=$p ;; esac
	done
	[ -z "$left" ] && exit 0
	i=$((i+1))
	sleep 0.002
done
echo "process $left did not stop" >&2
exit 1`

// freezeKeeper runs freezeScript in the member's container.
func (r *pghaDockerRunner) freezeKeeper(ctx context.Context) error {
	c, err := r.container()
	if err != nil {
		return err
	}
	code, out, err := c.Exec(ctx, []string{"/bin/sh", "-c", freezeScript}, tcexec.Multiplexed())
	if err == nil && code != 0 {
		b, _ := io.ReadAll(io.LimitReader(out, 4096))
		err = fmt.Errorf("exit status %d: %s", code, strings.TrimSpace(string(b)))
	}
	return err
}
