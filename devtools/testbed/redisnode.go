package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisNode is one Redis master of the bed and its fault handle. Its Addr
// stays the same for the life of the bed, across kills and restarts.
type RedisNode struct {
	name    string
	proxy   *nodeProxy
	backend redisBackend
	opts    Options
	cfg     redisConfig

	// dataMu serialises what starts the server or works on its data
	// directory: Restart, Snapshot, RestartFromSnapshot, KillLosingTail.
	dataMu    sync.Mutex
	snapshots int // snapshots taken, to name their files

	mu       sync.Mutex
	upstream string // the backend's own address, bypassing the proxy
	running  bool
	paused   bool
	closed   bool
	links    []*Link
}

// startRedisNode creates the node's directory, and its clock file when shim
// is set, and starts its server and proxy.
func startRedisNode(ctx context.Context, p provider, index int, opts Options, shim string) (*RedisNode, error) {
	name := fmt.Sprintf("redis%d", index+1)
	cfg := redisConfig{opts: opts, dir: filepath.Join(p.dir(), name)}
	if err := os.MkdirAll(cfg.dataDir(), 0o755); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if shim != "" {
		c, err := newClockFiles(cfg.dir, shim)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		cfg.clock = c
	}
	be, err := p.newRedis(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	n := &RedisNode{name: name, backend: be, opts: opts, cfg: cfg}
	up, err := n.startBackend(ctx, dataWipe)
	if err != nil {
		_ = be.close(context.Background())
		return nil, fmt.Errorf("%s: %w", n.name, err)
	}
	px, err := newNodeProxy(n.name, up)
	if err != nil {
		_ = be.close(context.Background())
		return nil, err
	}
	n.proxy = px
	return n, nil
}

// startBackend starts the server and waits until it answers PING.
func (n *RedisNode) startBackend(ctx context.Context, mode dataMode) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, n.opts.StartTimeout)
	defer cancel()
	up, err := n.backend.start(ctx, mode)
	if err != nil {
		return "", err
	}
	if err := waitRedis(ctx, up); err != nil {
		return "", err
	}
	n.mu.Lock()
	n.upstream, n.running, n.paused = up, true, false
	n.mu.Unlock()
	return up, nil
}

// waitRedis polls addr with PING until it answers or ctx ends. A node that
// is still loading its AOF answers LOADING, which counts as not ready.
func waitRedis(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1, DisableIdentity: true})
	defer c.Close()
	var last error
	for {
		if last = c.Ping(ctx).Err(); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redis at %s did not answer PING: %w (last: %v)", addr, ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Name is the node's name in the bed: redis1, redis2, ...
func (n *RedisNode) Name() string { return n.name }

// Addr is the address clients use: a loopback listener in front of the node.
func (n *RedisNode) Addr() string { return n.proxy.addr() }

// DirectAddr is the server's own address, bypassing the proxy: faults
// injected with Partition and AddLatency do not apply to it, and it changes
// when a restart replaces the server. Benchmarks use it to measure the
// servers rather than the proxy.
func (n *RedisNode) DirectAddr() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.upstream
}

// Pause freezes the server (SIGSTOP, or docker pause): it keeps its
// connections but answers nothing until Resume.
func (n *RedisNode) Pause(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.running {
		return fmt.Errorf("%s: pause: not running", n.name)
	}
	if err := n.backend.pause(ctx); err != nil {
		return fmt.Errorf("%s: pause: %w", n.name, err)
	}
	n.paused = true
	return nil
}

// Resume thaws a paused server.
func (n *RedisNode) Resume(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.paused {
		return nil
	}
	if err := n.backend.resume(ctx); err != nil {
		return fmt.Errorf("%s: resume: %w", n.name, err)
	}
	n.paused = false
	return nil
}

// Kill ends the server with SIGKILL: no shutdown, no last save.
func (n *RedisNode) Kill(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.running {
		return nil
	}
	if err := n.backend.kill(ctx); err != nil {
		return fmt.Errorf("%s: kill: %w", n.name, err)
	}
	n.running, n.paused = false, false
	return nil
}

// Restart starts the server again behind the same address, killing it first
// if it runs. With keepData it reloads what it had persisted (with the
// default AppendFsync=always, every acknowledged write); without, it comes
// back empty, as a node restored without its data.
func (n *RedisNode) Restart(ctx context.Context, keepData bool) error {
	n.dataMu.Lock()
	defer n.dataMu.Unlock()
	if err := n.Kill(ctx); err != nil {
		return err
	}
	mode := dataWipe
	if keepData {
		mode = dataKeep
	}
	up, err := n.startBackend(ctx, mode)
	if err != nil {
		return fmt.Errorf("%s: restart: %w", n.name, err)
	}
	if err := n.repoint(up); err != nil {
		return fmt.Errorf("%s: restart: %w", n.name, err)
	}
	return nil
}

// repoint points the node's proxy and every link at the server's new
// address. The links are read after startBackend stored up, under the same
// lock Link holds while it creates one, so a link made during a restart is
// either repointed here or created with up.
func (n *RedisNode) repoint(up string) error {
	n.mu.Lock()
	links := append([]*Link(nil), n.links...)
	n.mu.Unlock()
	var errs []error
	if err := n.proxy.setUpstream(up); err != nil {
		errs = append(errs, fmt.Errorf("repoint proxy: %w", err))
	}
	for _, l := range links {
		if err := l.proxy.setUpstream(up); err != nil {
			errs = append(errs, fmt.Errorf("repoint link %s: %w", l.name, err))
		}
	}
	return errors.Join(errs...)
}

// Partition cuts the node off from every client of Addr: bytes in both
// directions are dropped and connections hang, until Heal.
func (n *RedisNode) Partition(ctx context.Context) error {
	if err := n.proxy.heal(ctx); err != nil {
		return fmt.Errorf("%s: partition: %w", n.name, err)
	}
	if err := n.proxy.partition(); err != nil {
		return fmt.Errorf("%s: partition: %w", n.name, err)
	}
	return nil
}

// Heal ends a partition. Connections that lived through it are closed;
// clients reconnect.
func (n *RedisNode) Heal(ctx context.Context) error {
	if err := n.proxy.heal(ctx); err != nil {
		return fmt.Errorf("%s: %w", n.name, err)
	}
	return nil
}

// AddLatency delays every reply from the node by d; 0 removes the delay.
func (n *RedisNode) AddLatency(ctx context.Context, d time.Duration) error {
	if err := n.proxy.latency(ctx, d); err != nil {
		return fmt.Errorf("%s: latency: %w", n.name, err)
	}
	return nil
}

// Time returns the node's own clock (the TIME command), bypassing faults
// injected in the proxy.
func (n *RedisNode) Time(ctx context.Context) (time.Time, error) {
	c := n.Admin()
	defer c.Close()
	return c.Time(ctx).Result()
}

// Admin returns a new client that talks to the server directly, bypassing
// the proxy and its faults. The caller closes it.
func (n *RedisNode) Admin() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: n.DirectAddr(), DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1, DisableIdentity: true})
}

func (n *RedisNode) close(ctx context.Context) error {
	n.proxy.stop()
	n.mu.Lock()
	paused := n.paused
	n.closed = true
	links := n.links
	n.links = nil
	n.mu.Unlock()
	for _, l := range links {
		l.proxy.stop()
	}
	var errs []error
	if paused {
		errs = append(errs, n.backend.resume(ctx))
	}
	errs = append(errs, n.backend.close(ctx))
	return errors.Join(errs...)
}

// aofArgs are the redis-server options for the bed's AOF policy, for a start
// in mode.
func aofArgs(policy string, mode dataMode) []string {
	if policy == FsyncOff {
		return []string{"--appendonly", "no"}
	}
	on := "yes"
	if mode == dataRDB {
		on = "no"
	}
	return []string{"--appendonly", on, "--appendfsync", policy}
}

// resetDir empties dir, creating it if needed.
func resetDir(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.MkdirAll(dir, 0o755)
}
