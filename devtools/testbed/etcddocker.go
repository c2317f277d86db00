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

// dockerEtcd is one etcd container. It runs in the host's network
// namespace, on free loopback ports like a local member, so that the
// members reach each other through the bed's loopback peer proxies just as
// local processes do, and partitions cut the same paths. Its data
// directory, and the clock shim's files, are bind-mounted at their paths on
// this machine. Every start runs a new container on the same data
// directory, so a restarted member rejoins as itself.
type dockerEtcd struct {
	p   *dockerProvider
	cfg etcdConfig

	mu    sync.Mutex
	ports [2]int // client, peer
	c     *testcontainers.DockerContainer
}

func (p *dockerProvider) newEtcd(_ context.Context, cfg etcdConfig) (etcdBackend, error) {
	return &dockerEtcd{p: p, cfg: cfg, ports: cfg.ports}, nil
}

// request is the container for a start on the current ports. The member
// runs as this process's user, so that the bed can remove its files.
func (e *dockerEtcd) request() testcontainers.ContainerRequest {
	binds := []string{e.cfg.dataDir() + ":" + e.cfg.dataDir()}
	env := make(map[string]string)
	if c := e.cfg.clock; c != nil {
		binds = append(binds, c.shim+":"+c.shim+":ro", c.offset+":"+c.offset+":ro")
		for _, kv := range e.cfg.env() {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
	}
	user := fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid())
	return testcontainers.ContainerRequest{
		Image: e.p.etcdImage, Entrypoint: []string{"etcd"}, Cmd: e.cfg.args(e.ports[0], e.ports[1]), Env: env,
		ConfigModifier: func(c *container.Config) { c.User = user },
		HostConfigModifier: func(hc *container.HostConfig) {
			hc.NetworkMode = "host"
			hc.Binds = append(hc.Binds, binds...)
		},
	}
}

// start replaces the member's container with a new one, on new ports when
// the old ones were taken since.
func (e *dockerEtcd) start(ctx context.Context) (etcdAddrs, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		if err := e.removeLocked(ctx); err != nil {
			return etcdAddrs{}, err
		}
		if attempt > 0 {
			ports, err := freePorts(2)
			if err != nil {
				return etcdAddrs{}, err
			}
			e.ports = [2]int{ports[0], ports[1]}
		}
		addrs := etcdAddrs{client: loopback(e.ports[0]), peer: loopback(e.ports[1])}
		c, err := e.p.create(ctx, e.request())
		if err != nil {
			return etcdAddrs{}, err
		}
		e.c = c
		alive := func(ctx context.Context) error {
			if up, err := e.p.running(ctx, c.GetContainerID()); err != nil || !up {
				return errors.Join(errors.New("the etcd container exited"), err)
			}
			return nil
		}
		if err = waitListening(ctx, alive, addrs.client, addrs.peer); err == nil {
			return addrs, nil
		}
		log := containerLog(c, 1500)
		last = fmt.Errorf("%s: %w\n%s", e.cfg.name, err, log)
		if ctx.Err() != nil || !strings.Contains(log, "address already in use") {
			break
		}
	}
	return etcdAddrs{}, last
}

// containerLog is the end of a container's output, for error messages.
func containerLog(c *testcontainers.DockerContainer, max int) string {
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

func (e *dockerEtcd) removeLocked(ctx context.Context) error {
	if e.c == nil {
		return nil
	}
	err := e.c.Terminate(ctx)
	e.c = nil
	if err != nil {
		return fmt.Errorf("remove old container: %w", err)
	}
	return nil
}

func (e *dockerEtcd) id() (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.c == nil {
		return "", errors.New("no container")
	}
	return e.c.GetContainerID(), nil
}

func (e *dockerEtcd) pause(ctx context.Context) error {
	id, err := e.id()
	if err != nil {
		return err
	}
	_, err = e.p.cli.ContainerPause(ctx, id, client.ContainerPauseOptions{})
	return err
}

func (e *dockerEtcd) resume(ctx context.Context) error {
	id, err := e.id()
	if err != nil {
		return err
	}
	_, err = e.p.cli.ContainerUnpause(ctx, id, client.ContainerUnpauseOptions{})
	return err
}

func (e *dockerEtcd) kill(ctx context.Context) error {
	id, err := e.id()
	if err != nil {
		return err
	}
	return e.p.kill(ctx, id)
}

func (e *dockerEtcd) close(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.removeLocked(ctx)
}
