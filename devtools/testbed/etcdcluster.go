package testbed

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// etcdConfig is what a provider needs to create one etcd member.
type etcdConfig struct {
	opts Options
	name string
	// dir is the member's own directory on this machine; its data
	// directory is dir/data, at the same path inside a container.
	dir string
	// clientURL and peerURL are the URLs the member advertises: its
	// proxies', so that clients and the other members reach it through
	// them.
	clientURL string
	peerURL   string
	// cluster is --initial-cluster, every member's name=peerURL.
	cluster string
	token   string
	// ports are the client and peer ports of the first start; a backend
	// takes others if these are taken by then.
	ports [2]int
	// clock is the clock shim to preload, or nil without Options.Clock.
	clock *clockFiles
}

// dataDir is the member's data directory.
func (c etcdConfig) dataDir() string { return filepath.Join(c.dir, "data") }

// args are etcd's flags for the member listening on loopback ports client
// and peer. With an existing data directory etcd ignores the --initial-*
// flags and rejoins as the member its write-ahead log says it is.
func (c etcdConfig) args(client, peer int) []string {
	return []string{
		"--name", c.name, "--data-dir", c.dataDir(),
		"--listen-client-urls", "http://127.0.0.1:" + strconv.Itoa(client),
		"--advertise-client-urls", c.clientURL,
		"--listen-peer-urls", "http://127.0.0.1:" + strconv.Itoa(peer),
		"--initial-advertise-peer-urls", c.peerURL,
		"--initial-cluster", c.cluster, "--initial-cluster-state", "new",
		"--initial-cluster-token", c.token,
		"--heartbeat-interval", "100", "--election-timeout", "1000",
		// etcd 3.5 and later default to pre-vote; 3.4 does not. With it, a
		// member cut off does not force an election when it comes back.
		"--pre-vote=true",
		"--logger", "zap", "--log-outputs", "stderr",
	}
}

// env is the environment that preloads the clock shim, or nil.
func (c etcdConfig) env() []string {
	if c.clock == nil {
		return nil
	}
	return []string{"LD_PRELOAD=" + c.clock.shim, clockFileEnv + "=" + c.clock.offset, clockVDSOEnv + "=1"}
}

// startEtcdCluster creates the proxies of opts.Etcd members, starts the
// members at once and waits until every one serves clients. closeAll stops
// whatever was started, also when err is set.
func startEtcdCluster(ctx context.Context, p provider, opts Options, shim string) (members []*EtcdNode, closeAll func(context.Context) error, err error) {
	peers := &etcdPeers{cut: make([]bool, opts.Etcd)}
	closeAll = func(ctx context.Context) error {
		var errs []error
		for _, n := range peers.members {
			errs = append(errs, n.close(ctx))
		}
		return errors.Join(errs...)
	}
	token := make([]byte, 8)
	if _, err := rand.Read(token); err != nil {
		return nil, closeAll, err
	}
	var cluster []string
	for i := range opts.Etcd {
		n, err := newEtcdNode(i, peers)
		if err != nil {
			return nil, closeAll, err
		}
		peers.members = append(peers.members, n)
		cluster = append(cluster, n.name+"="+n.PeerURL())
	}
	for _, n := range peers.members {
		cfg := etcdConfig{opts: opts, name: n.name, dir: filepath.Join(p.dir(), n.name),
			clientURL: "http://" + n.Addr(), peerURL: n.PeerURL(), cluster: strings.Join(cluster, ","),
			token: "quorumlock-bed-" + hex.EncodeToString(token), ports: n.firstPorts}
		if err := n.configure(ctx, p, cfg, shim); err != nil {
			return nil, closeAll, err
		}
	}
	if err := startAll(ctx, opts, peers.members); err != nil {
		return nil, closeAll, err
	}
	return peers.members, closeAll, nil
}

// startAll starts every member at once (the first members wait for the
// others to form a quorum), then waits until each serves clients, and
// learns the member IDs.
func startAll(ctx context.Context, opts Options, members []*EtcdNode) error {
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	for i, n := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = n.startBackend(ctx); errs[i] == nil {
				errs[i] = n.WaitReady(ctx)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return learnIDs(ctx, members)
}

// etcdPeers is the bookkeeping the members of one cluster share: which
// members are partitioned, so that every peer proxy drops the raft traffic
// those members start.
type etcdPeers struct {
	mu      sync.Mutex
	members []*EtcdNode
	cut     []bool
}

// setCut records whether member i is partitioned and sets every member's
// peer filter to the partitioned members other than itself.
func (ps *etcdPeers) setCut(i int, cut bool) error {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.cut[i] = cut
	var errs []error
	for j, m := range ps.members {
		var from []string
		for k, c := range ps.cut {
			if c && k != j {
				from = append(from, ps.members[k].PeerURL())
			}
		}
		if err := m.peer.setBlocked(from); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.name, err))
		}
	}
	return errors.Join(errs...)
}

// freePorts returns n distinct free loopback ports.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// waitListening waits until every address accepts TCP connections. alive
// reports an error once the server has exited, which ends the wait.
func waitListening(ctx context.Context, alive func(context.Context) error, addrs ...string) error {
	for {
		if err := alive(ctx); err != nil {
			return err
		}
		up := 0
		for _, a := range addrs {
			c, err := net.DialTimeout("tcp", a, 200*time.Millisecond)
			if err == nil {
				_ = c.Close()
				up++
			}
		}
		if up == len(addrs) {
			return nil
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return fmt.Errorf("%s not listening: %w", strings.Join(addrs, ", "), err)
		}
	}
}

// newEtcdDir creates a member's directory and an empty data directory
// with the permissions etcd wants.
func newEtcdDir(cfg etcdConfig) error {
	if err := os.MkdirAll(cfg.dir, 0o755); err != nil {
		return err
	}
	return os.MkdirAll(cfg.dataDir(), 0o700)
}
