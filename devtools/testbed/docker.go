//go:build !nodocker

package testbed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

// dockerProvider runs the servers as containers through testcontainers-go.
type dockerProvider struct {
	cli           *testcontainers.DockerClient
	redisImage    string
	etcdImage     string
	postgresImage string
	// pghaBins are the image's programs that a Postgres HA group runs,
	// found when the bed has one (see probePGHA).
	pghaBins pghaBins
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
	if opts.Postgres || opts.PostgresHA {
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
	// The servers run as this process's user (see dockerRunner.request),
	// so they can reach it; so can the engine.
	if err := os.Chmod(dir, 0o755); err != nil {
		_ = cli.Close()
		_ = os.RemoveAll(dir)
		return nil, err
	}
	p.cli, p.tmp = cli, dir
	if err := p.probePGHA(ctx, opts); err != nil {
		_ = p.close()
		return nil, err
	}
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

// image is the image that runs servers of kind.
func (p *dockerProvider) image(kind string) string {
	switch kind {
	case kindRedis:
		return p.redisImage
	case kindEtcd:
		return p.etcdImage
	}
	return p.postgresImage
}

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

// kill sends SIGKILL to a container and waits until the engine reports it
// stopped, so a restart finds it so.
func (p *dockerProvider) kill(ctx context.Context, id string) error {
	if _, err := p.cli.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		// A container whose server already ended is killed, as a local
		// process that already exited is.
		if running, rerr := p.running(ctx, id); rerr == nil && !running {
			return nil
		}
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
