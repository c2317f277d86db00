package testbed

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisNode is one Redis master of the bed and its fault handle. Its Addr
// stays the same for the life of the bed, across kills and restarts.
type RedisNode struct {
	*node
	opts Options
	// clock is the node's clock shim files, or nil without Options.Clock.
	clock     *clockFiles
	snapshots int // snapshots taken, to name their files; under dataMu
}

// startRedisNode creates the node's directory, and its clock file when shim
// is set, and starts its server and proxy.
func startRedisNode(ctx context.Context, p provider, index int, opts Options, shim string) (*RedisNode, error) {
	nd, err := newNode(fmt.Sprintf("redis%d", index+1), 1, true)
	if err != nil {
		return nil, err
	}
	n := &RedisNode{node: nd, opts: opts}
	if err := n.configure(p, shim); err != nil {
		_ = nd.close(context.Background())
		return nil, fmt.Errorf("%s: %w", nd.Name(), err)
	}
	if err := nd.start(ctx, dataWipe); err != nil {
		_ = nd.close(context.Background())
		return nil, fmt.Errorf("%s: %w", nd.Name(), err)
	}
	return n, nil
}

// configure creates the node's directories and clock file, and gives it
// its server description and runner.
func (n *RedisNode) configure(p provider, shim string) error {
	srv := server{name: n.Name(), kind: kindRedis, dir: filepath.Join(p.dir(), n.Name()), ports: 1,
		args: n.args, stop: syscall.SIGKILL, startTimeout: n.opts.StartTimeout}
	srv.probe = func(ctx context.Context, addrs []string) error { return pingRedis(ctx, addrs, srv.dataDir()) }
	if err := os.MkdirAll(srv.dataDir(), 0o755); err != nil {
		return err
	}
	if shim != "" {
		c, err := newClockFiles(srv.dir, shim)
		if err != nil {
			return err
		}
		n.clock = c
		srv.env = []string{"LD_PRELOAD=" + c.shim, clockFileEnv + "=" + c.offset}
		srv.binds = []string{c.shim}
	}
	run, err := p.runner(srv)
	if err != nil {
		return err
	}
	n.srv, n.run = srv, run
	return nil
}

// args are redis-server's flags for a start on ports in mode.
func (n *RedisNode) args(ports []int, mode dataMode) []string {
	args := []string{"--port", strconv.Itoa(ports[0]), "--bind", "127.0.0.1", "--protected-mode", "no",
		"--dir", n.srv.dataDir(), "--save", "", "--daemonize", "no", "--logfile", ""}
	return append(args, aofArgs(n.opts.AppendFsync, mode)...)
}

// pingRedis asks the server at addrs[0] for PING once. A node that is
// still loading its AOF answers LOADING, which counts as not ready.
func pingRedis(ctx context.Context, addrs []string, dir string) error {
	c := redis.NewClient(&redis.Options{Addr: addrs[0], DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1, DisableIdentity: true})
	defer c.Close()
	got, err := c.ConfigGet(ctx, "dir").Result()
	if err != nil {
		return err
	}
	return sameDir(got["dir"], dir)
}

// sameDir checks that the Redis that answered works in dir, the node's
// own, and not another server that took the port between the bed's choice
// of it and the node's bind (the node's server then exits with "address
// already in use", and the bed must see that and choose other ports).
func sameDir(got, dir string) error {
	want, err := filepath.EvalSymlinks(dir)
	if err != nil {
		want = dir
	}
	if got != want && got != dir {
		return fmt.Errorf("the Redis on this port works in %q, not in the node's %q: another server holds the port", got, want)
	}
	return nil
}

// Restart starts the server again behind the same address, killing it first
// if it runs. With keepData it reloads what it had persisted (with the
// default AppendFsync=always, every acknowledged write); without, it comes
// back empty, as a node restored without its data.
func (n *RedisNode) Restart(ctx context.Context, keepData bool) error {
	mode := dataWipe
	if keepData {
		mode = dataKeep
	}
	return n.restart(ctx, mode)
}

// Link creates a new link to the node. name identifies it among the node's
// links (one per client, say "client-a"); it must not be empty or in use on
// this node.
func (n *RedisNode) Link(name string) (*Link, error) { return n.link(name) }

// Time returns the node's own clock (the TIME command), bypassing faults
// injected in the proxy.
func (n *RedisNode) Time(ctx context.Context) (time.Time, error) {
	c := n.Admin()
	defer c.Close()
	return c.Time(ctx).Result()
}

// Admin returns a new client that talks to the server directly, bypassing
// the proxy and its faults, with 3 s timeouts: on a loaded machine a
// server can stall on an fsync for over a second. The caller closes it.
func (n *RedisNode) Admin() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: n.DirectAddr(), DialTimeout: 3 * time.Second, ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second, MaxRetries: -1, DisableIdentity: true})
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
