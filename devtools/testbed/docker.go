//go:build !nodocker

package testbed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

// dockerProvider runs the servers as containers through testcontainers-go.
type dockerProvider struct {
	cli           *testcontainers.DockerClient
	redisImage    string
	etcdImage     string
	postgresImage string
	// tmp holds the nodes' data directories, bind-mounted into their
	// containers, and the clock files.
	tmp string
}

type discardLogger struct{}

func (discardLogger) Printf(string, ...any) {}

func newDockerProvider(ctx context.Context, opts Options) (*dockerProvider, error) {
	if os.Getenv("TESTCONTAINERS_RYUK_DISABLED") != "true" {
		// The reaper image cannot be pulled without a registry; the bed
		// removes its own containers.
		return nil, errors.New("set TESTCONTAINERS_RYUK_DISABLED=true (the bed cleans up its own containers)")
	}
	p := &dockerProvider{
		redisImage:    envOr(EnvRedisImage, DefaultRedisImage),
		etcdImage:     envOr(EnvEtcdImage, DefaultEtcdImage),
		postgresImage: envOr(EnvPostgresImage, DefaultPostgresImage),
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cli, err := testcontainers.NewDockerClientWithOpts(pctx)
	if err != nil {
		return nil, fmt.Errorf("docker engine: %w", err)
	}
	if _, err := cli.Ping(pctx, client.PingOptions{}); err != nil {
		_ = cli.Close()
		return nil, fmt.Errorf("docker engine does not answer: %w", err)
	}
	// Only the images this bed runs must exist: a bed without etcd runs
	// where the etcd image was never built.
	var need []string
	if opts.Redis > 0 {
		need = append(need, p.redisImage)
	}
	if opts.Etcd > 0 {
		need = append(need, p.etcdImage)
	}
	if opts.Postgres {
		need = append(need, p.postgresImage)
	}
	for _, img := range need {
		if _, err := cli.ImageInspect(pctx, img); err != nil {
			_ = cli.Close()
			return nil, fmt.Errorf("image %s is not present (no registry to pull from: run `make images`, or set %s/%s/%s): %w",
				img, EnvRedisImage, EnvEtcdImage, EnvPostgresImage, err)
		}
	}
	dir, err := os.MkdirTemp("", "quorumlock-bed-")
	if err != nil {
		_ = cli.Close()
		return nil, err
	}
	// The servers run as this process's user (see dockerRedis.request),
	// so they can reach it; so can the engine.
	if err := os.Chmod(dir, 0o755); err != nil {
		_ = cli.Close()
		_ = os.RemoveAll(dir)
		return nil, err
	}
	p.cli, p.tmp = cli, dir
	return p, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func (p *dockerProvider) name() string { return ProviderDocker }

func (p *dockerProvider) hint() string {
	return "\nthe docker provider needs a running engine and the images " + p.redisImage + ", " + p.etcdImage +
		" and " + p.postgresImage + " (those the bed runs): run `make images`, or use QUORUMLOCK_TESTBED=local"
}

func (p *dockerProvider) dir() string { return p.tmp }

func (p *dockerProvider) close() error {
	return errors.Join(p.cli.Close(), os.RemoveAll(p.tmp))
}

// run creates and starts a container and returns it with the host address
// of its port.
func (p *dockerProvider) run(ctx context.Context, req testcontainers.ContainerRequest, port string) (*testcontainers.DockerContainer, string, error) {
	dc, err := p.create(ctx, req)
	if err != nil {
		return nil, "", err
	}
	addr, err := hostAddr(ctx, dc, port)
	if err != nil {
		_ = dc.Terminate(context.Background())
		return nil, "", err
	}
	return dc, addr, nil
}

// create creates and starts a container, labelled as the bed's.
func (p *dockerProvider) create(ctx context.Context, req testcontainers.ContainerRequest) (*testcontainers.DockerContainer, error) {
	req.Labels = map[string]string{"org.quorumlock.testbed": "1"}
	c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: req, Started: true, Logger: discardLogger{},
	})
	var dc *testcontainers.DockerContainer
	if c != nil {
		dc, _ = c.(*testcontainers.DockerContainer)
	}
	if err != nil {
		if dc != nil {
			_ = dc.Terminate(context.Background())
		}
		return nil, err
	}
	if dc == nil {
		return nil, fmt.Errorf("unexpected container type %T", c)
	}
	return dc, nil
}

// hostAddr is the address of the container's published port. With a
// local engine (a unix socket) ports are published on the loopback of this
// machine; testcontainers' own guess can be a gateway address when the
// tests themselves run inside a container or VM. A remote engine
// (DOCKER_HOST=tcp://...) or TESTCONTAINERS_HOST_OVERRIDE keeps its guess.
func hostAddr(ctx context.Context, c *testcontainers.DockerContainer, port string) (string, error) {
	p, err := c.MappedPort(ctx, port)
	if err != nil {
		return "", err
	}
	host := "127.0.0.1"
	if strings.HasPrefix(os.Getenv("DOCKER_HOST"), "tcp://") || os.Getenv("TESTCONTAINERS_HOST_OVERRIDE") != "" {
		if host, err = c.Host(ctx); err != nil {
			return "", err
		}
	}
	return net.JoinHostPort(host, p.Port()), nil
}

// Paths inside a Redis container.
const (
	containerData      = "/data"
	containerClockShim = "/quorumlock/clockshim.so"
	containerClockFile = "/quorumlock/clock-offset"
)

// dockerRedis is one Redis container. Its /data is the node's data
// directory on this machine, bind-mounted, so the bed can copy snapshots in
// and cut the AOF while the server is down. A restart with data starts the
// same container again; a restart without data empties the directory and
// replaces the container with a new one; a start from an RDB snapshot runs a
// container of its own (with appendonly no), replaced at the next start.
type dockerRedis struct {
	p   *dockerProvider
	cfg redisConfig

	mu    sync.Mutex
	c     *testcontainers.DockerContainer
	rdbOn bool // c was created for a dataRDB start
}

func (p *dockerProvider) newRedis(_ context.Context, cfg redisConfig) (redisBackend, error) {
	return &dockerRedis{p: p, cfg: cfg}, nil
}

// request is the container for a start in mode. The server runs as this
// process's user rather than the image's (redis, uid 100 in the local
// image), so that the files it writes in the bind-mounted data directory
// belong to the bed, which copies, truncates and removes them.
func (r *dockerRedis) request(mode dataMode) testcontainers.ContainerRequest {
	cmd := []string{"redis-server", "--bind", "0.0.0.0", "--protected-mode", "no", "--port", "6379",
		"--dir", containerData, "--save", ""}
	cmd = append(cmd, aofArgs(r.cfg.opts.AppendFsync, mode)...)
	binds := []string{r.cfg.dataDir() + ":" + containerData}
	var env map[string]string
	if c := r.cfg.clock; c != nil {
		binds = append(binds, c.shim+":"+containerClockShim+":ro", c.offset+":"+containerClockFile+":ro")
		env = map[string]string{"LD_PRELOAD": containerClockShim, clockFileEnv: containerClockFile}
	}
	user := fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid())
	return testcontainers.ContainerRequest{
		Image: r.p.redisImage, Cmd: cmd, Env: env, ExposedPorts: []string{"6379/tcp"},
		ConfigModifier:     func(c *container.Config) { c.User = user },
		HostConfigModifier: func(hc *container.HostConfig) { hc.Binds = append(hc.Binds, binds...) },
	}
}

func (r *dockerRedis) start(ctx context.Context, mode dataMode) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if mode == dataKeep && r.c != nil && !r.rdbOn {
		if _, err := r.p.cli.ContainerStart(ctx, r.c.GetContainerID(), client.ContainerStartOptions{}); err != nil {
			return "", err
		}
		return hostAddr(ctx, r.c, "6379/tcp")
	}
	if r.c != nil {
		if err := r.c.Terminate(ctx); err != nil {
			return "", fmt.Errorf("remove old container: %w", err)
		}
		r.c = nil
	}
	if mode == dataWipe {
		if err := resetDir(r.cfg.dataDir()); err != nil {
			return "", err
		}
	}
	c, addr, err := r.p.run(ctx, r.request(mode), "6379/tcp")
	if err != nil {
		return "", err
	}
	r.c, r.rdbOn = c, mode == dataRDB
	return addr, nil
}

func (r *dockerRedis) id() (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.c == nil {
		return "", errors.New("no container")
	}
	return r.c.GetContainerID(), nil
}

func (r *dockerRedis) pause(ctx context.Context) error {
	id, err := r.id()
	if err != nil {
		return err
	}
	_, err = r.p.cli.ContainerPause(ctx, id, client.ContainerPauseOptions{})
	return err
}

func (r *dockerRedis) resume(ctx context.Context) error {
	id, err := r.id()
	if err != nil {
		return err
	}
	_, err = r.p.cli.ContainerUnpause(ctx, id, client.ContainerUnpauseOptions{})
	return err
}

func (r *dockerRedis) kill(ctx context.Context) error {
	id, err := r.id()
	if err != nil {
		return err
	}
	return r.p.kill(ctx, id)
}

// kill sends SIGKILL to a container and waits until the engine reports it
// stopped, so a restart finds it so.
func (p *dockerProvider) kill(ctx context.Context, id string) error {
	if _, err := p.cli.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		running, err := p.running(ctx, id)
		if err != nil || !running {
			return err
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	return errors.New("container still running 10s after SIGKILL")
}

// running says whether the engine reports the container running.
func (p *dockerProvider) running(ctx context.Context, id string) (bool, error) {
	st, err := p.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return false, err
	}
	return st.Container.State.Running, nil
}

func (r *dockerRedis) close(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.c == nil {
		return nil
	}
	err := r.c.Terminate(ctx)
	r.c = nil
	return err
}

// startPostgres runs the Postgres image with the bed's credentials. Images
// that follow the official image's conventions read them from the
// environment; the locally built image has them baked in.
func (p *dockerProvider) startPostgres(ctx context.Context, opts Options) (*PostgresNode, error) {
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	c, addr, err := p.run(ctx, testcontainers.ContainerRequest{
		Image:        p.postgresImage,
		ExposedPorts: []string{"5432/tcp"},
		Env: map[string]string{
			"POSTGRES_USER": PostgresUser, "POSTGRES_PASSWORD": PostgresPassword, "POSTGRES_DB": PostgresDB,
		},
		Cmd: []string{"postgres", "-c", "max_connections=300"},
	}, "5432/tcp")
	if err != nil {
		return nil, err
	}
	host, port, _ := strings.Cut(addr, ":")
	node := &PostgresNode{host: host}
	if _, err := fmt.Sscan(port, &node.port); err != nil {
		_ = c.Terminate(context.Background())
		return nil, fmt.Errorf("port %q: %w", port, err)
	}
	node.stopServer = func(ctx context.Context) error { return c.Terminate(ctx) }
	if err := node.waitReady(ctx, nil); err != nil {
		_ = c.Terminate(context.Background())
		return nil, err
	}
	if err := node.createMainDB(ctx); err != nil {
		_ = c.Terminate(context.Background())
		return nil, err
	}
	return node, nil
}
