package testbed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// EtcdNode is one member of the bed's etcd cluster and its fault handle.
//
// Two loopback proxies stand in front of the member: Addr, for clients, and
// PeerURL, the URL it advertises to the other members, so every member
// dials the others through their peer proxies. Both stay the same for the
// life of the bed, across kills and restarts.
type EtcdNode struct {
	*node
	index int
	peers *etcdPeers
	// clock is the member's clock shim files, or nil without
	// Options.Clock; clockMu serialises AdvanceMonotonic.
	clock   *clockFiles
	clockMu sync.Mutex

	id uint64 // under node.mu
}

// etcdCluster is what every member's command line names: the cluster
// (every member's name=peerURL) and its token.
type etcdCluster struct {
	members string
	token   string
}

// newEtcdNode picks the member's first client and peer ports and starts its
// two proxies in front of them.
func newEtcdNode(index int, peers *etcdPeers) (*EtcdNode, error) {
	nd, err := newNode(fmt.Sprintf("etcd%d", index+1), 2, true)
	if err != nil {
		return nil, err
	}
	return &EtcdNode{node: nd, index: index, peers: peers}, nil
}

// configure creates the member's directory, its clock file when shim is
// set, and gives it its server description and runner.
func (n *EtcdNode) configure(p provider, opts Options, cl etcdCluster, shim string) error {
	srv := server{name: n.Name(), kind: kindEtcd, dir: filepath.Join(p.dir(), n.Name()), ports: 2,
		probe: dialAll, stop: syscall.SIGKILL, startTimeout: opts.StartTimeout}
	srv.args = func(ports []int, _ dataMode) []string { return n.args(srv.dataDir(), cl, ports) }
	if err := os.MkdirAll(srv.dir, 0o755); err != nil {
		return fmt.Errorf("%s: %w", n.Name(), err)
	}
	if err := os.MkdirAll(srv.dataDir(), 0o700); err != nil {
		return fmt.Errorf("%s: %w", n.Name(), err)
	}
	if shim != "" {
		c, err := newClockFiles(srv.dir, shim)
		if err != nil {
			return fmt.Errorf("%s: %w", n.Name(), err)
		}
		n.clock = c
		srv.env = []string{"LD_PRELOAD=" + c.shim, clockFileEnv + "=" + c.offset, clockVDSOEnv + "=1"}
		srv.binds = []string{c.shim}
	}
	run, err := p.runner(srv)
	if err != nil {
		return fmt.Errorf("%s: %w", n.Name(), err)
	}
	n.srv, n.run = srv, run
	return nil
}

// args are etcd's flags for the member listening on loopback ports (client,
// peer). With an existing data directory etcd ignores the --initial-* flags
// and rejoins as the member its write-ahead log says it is.
func (n *EtcdNode) args(data string, cl etcdCluster, ports []int) []string {
	return []string{
		"--name", n.Name(), "--data-dir", data,
		"--listen-client-urls", "http://127.0.0.1:" + strconv.Itoa(ports[0]),
		"--advertise-client-urls", "http://" + n.Addr(),
		"--listen-peer-urls", "http://127.0.0.1:" + strconv.Itoa(ports[1]),
		"--initial-advertise-peer-urls", n.PeerURL(),
		"--initial-cluster", cl.members, "--initial-cluster-state", "new",
		"--initial-cluster-token", cl.token,
		"--heartbeat-interval", "100", "--election-timeout", "1000",
		// etcd 3.5 and later default to pre-vote; 3.4 does not. With it, a
		// member cut off does not force an election when it comes back.
		"--pre-vote=true",
		"--logger", "zap", "--log-outputs", "stderr",
	}
}

// dialAll checks once that every address accepts a TCP connection: an etcd
// member listens before it has joined a quorum, which WaitReady waits for.
func dialAll(_ context.Context, addrs []string) error {
	for _, a := range addrs {
		c, err := net.DialTimeout("tcp", a, 200*time.Millisecond)
		if err != nil {
			return err
		}
		_ = c.Close()
	}
	return nil
}

// ID is the member's ID in etcd. It stays the same across restarts.
func (n *EtcdNode) ID() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.id
}

// PeerURL is the URL the member advertises to the other members: a
// loopback listener in front of its peer port.
func (n *EtcdNode) PeerURL() string { return "http://" + n.front[1].addr() }

// Restart starts the member again with its data directory, killing it
// first if it runs: it rejoins the cluster as the same member, behind the
// same addresses. It returns once the member listens; it serves clients
// once it has caught up with a quorum, which WaitReady waits for.
func (n *EtcdNode) Restart(ctx context.Context) error {
	return n.restart(ctx, dataKeep)
}

// Partition cuts the member off from its clients and from the other
// members, in both directions: its client and peer proxies drop every byte
// and hang their connections, and the other members' peer proxies drop the
// raft connections it opens to them. Heal ends it.
func (n *EtcdNode) Partition(ctx context.Context) error {
	if err := n.node.Partition(ctx); err != nil {
		return err
	}
	if err := n.peers.setCut(n.index, true); err != nil {
		return fmt.Errorf("%s: partition: %w", n.Name(), err)
	}
	return nil
}

// Heal ends a partition. Connections that lived through it are closed;
// clients and members reconnect.
func (n *EtcdNode) Heal(ctx context.Context) error {
	err := n.peers.setCut(n.index, false)
	if err != nil {
		err = fmt.Errorf("%s: heal: %w", n.Name(), err)
	}
	return errors.Join(n.node.Heal(ctx), err)
}
