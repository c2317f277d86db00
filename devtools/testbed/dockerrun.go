//go:build !nodocker

package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

// dockerRunner runs a server as a container. A server started by its
// command line runs in the host's network namespace, on free loopback
// ports like a local process, so that its traffic (an etcd member's peer
// traffic too) crosses the same proxies as the local provider's; its
// directory and the clock shim are bind-mounted at their paths on this
// machine. A server with an image form runs the image's own way, on a
// published port. Every start runs a new container: the data lives in the
// bind-mounted directory, so a restart with data finds it there.
type dockerRunner struct {
	p   *dockerProvider
	srv server

	mu sync.Mutex
	c  *testcontainers.DockerContainer
}

// ErrRemoteEngine: the docker provider runs Redis and etcd in the host's
// network namespace, which a remote engine (DOCKER_HOST=tcp://...,
// TESTCONTAINERS_HOST_OVERRIDE) cannot share with this process.
var ErrRemoteEngine = errors.New("testbed: Redis and etcd containers run in the host's network, which needs a Docker engine on this Linux machine; use QUORUMLOCK_TESTBED=local with a remote engine")

func (p *dockerProvider) runner(srv server) (runner, error) {
	if srv.image == nil && remoteEngine() {
		return nil, fmt.Errorf("%s: %w (DOCKER_HOST=%q)", srv.name, ErrRemoteEngine, os.Getenv("DOCKER_HOST"))
	}
	return &dockerRunner{p: p, srv: srv}, nil
}

// remoteEngine reports whether the Docker engine is on another machine.
func remoteEngine() bool {
	return strings.HasPrefix(os.Getenv("DOCKER_HOST"), "tcp://") || os.Getenv("TESTCONTAINERS_HOST_OVERRIDE") != ""
}

func (r *dockerRunner) start(ctx context.Context, ports []int, mode dataMode) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.removeLocked(ctx); err != nil {
		return nil, err
	}
	if im := r.srv.image; im != nil {
		c, addr, err := r.p.run(ctx, testcontainers.ContainerRequest{
			Image: r.p.image(r.srv.kind), ExposedPorts: []string{im.port}, Env: im.env, Cmd: im.cmd,
		}, im.port)
		r.c = c
		return []string{addr}, err
	}
	c, err := r.p.create(ctx, r.request(ports, mode))
	if err != nil {
		return nil, err
	}
	r.c = c
	addrs := make([]string, len(ports))
	for i, port := range ports {
		addrs[i] = loopback(port)
	}
	return addrs, nil
}

// request is the container for a start of the server's command line on
// ports. It runs as this process's user, so that the files it writes in the
// bind-mounted directory belong to the bed, which copies, truncates and
// removes them.
func (r *dockerRunner) request(ports []int, mode dataMode) testcontainers.ContainerRequest {
	binds := []string{r.srv.dir + ":" + r.srv.dir}
	for _, b := range r.srv.binds {
		binds = append(binds, b+":"+b+":ro")
	}
	env := make(map[string]string)
	for _, kv := range r.srv.env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	user := fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid())
	return testcontainers.ContainerRequest{
		Image: r.p.image(r.srv.kind), Entrypoint: []string{r.srv.binary()}, Cmd: r.srv.args(ports, mode), Env: env,
		ConfigModifier: func(c *container.Config) { c.User = user },
		HostConfigModifier: func(hc *container.HostConfig) {
			hc.NetworkMode = "host"
			hc.Binds = append(hc.Binds, binds...)
		},
	}
}

func (r *dockerRunner) removeLocked(ctx context.Context) error { return removeContainer(ctx, &r.c) }

// removeContainer terminates *c, if any, and forgets it.
func removeContainer(ctx context.Context, c **testcontainers.DockerContainer) error {
	if *c == nil {
		return nil
	}
	err := (*c).Terminate(ctx)
	*c = nil
	if err != nil {
		return fmt.Errorf("remove old container: %w", err)
	}
	return nil
}

func (r *dockerRunner) id() (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.c == nil {
		return "", errors.New("no container")
	}
	return r.c.GetContainerID(), nil
}

func (r *dockerRunner) exited(ctx context.Context) error {
	id, err := r.id()
	if err != nil {
		return err
	}
	if up, err := r.p.running(ctx, id); err != nil || !up {
		return errors.Join(fmt.Errorf("the %s container exited", r.srv.kind), err)
	}
	return nil
}

// log is the end of the container's output.
func (r *dockerRunner) log(max int) string {
	r.mu.Lock()
	c := r.c
	r.mu.Unlock()
	if c == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rc, err := c.Logs(ctx)
	if err != nil {
		return ""
	}
	defer rc.Close()
	b, _ := io.ReadAll(io.LimitReader(rc, 1<<20))
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

func (r *dockerRunner) pause(ctx context.Context) error {
	id, err := r.id()
	if err != nil {
		return err
	}
	_, err = r.p.cli.ContainerPause(ctx, id, client.ContainerPauseOptions{})
	return err
}

func (r *dockerRunner) resume(ctx context.Context) error {
	id, err := r.id()
	if err != nil {
		return err
	}
	_, err = r.p.cli.ContainerUnpause(ctx, id, client.ContainerUnpauseOptions{})
	return err
}

func (r *dockerRunner) kill(ctx context.Context) error {
	id, err := r.id()
	if err != nil {
		return err
	}
	return r.p.kill(ctx, id)
}

func (r *dockerRunner) close(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.removeLocked(ctx)
}
