package testbed

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// EtcdNode is one member of the bed's etcd cluster and its fault handle.
//
// Two loopback proxies stand in front of the member: Addr, for clients, and
// PeerURL, the URL it advertises to the other members, so every member
// dials the others through their peer proxies. Both stay the same for the
// life of the bed, across kills and restarts.
type EtcdNode struct {
	name   string
	index  int
	client *nodeProxy
	peer   *nodeProxy
	peers  *etcdPeers

	cfg     etcdConfig
	backend etcdBackend

	// restartMu serialises Restart; clockMu, AdvanceMonotonic.
	restartMu sync.Mutex
	clockMu   sync.Mutex

	// firstPorts are the client and peer ports of the first start.
	firstPorts [2]int

	mu      sync.Mutex
	id      uint64
	direct  etcdAddrs // the backend's own addresses, bypassing the proxies
	running bool
	paused  bool
}

// newEtcdNode picks the member's first ports and starts its two proxies in
// front of them.
func newEtcdNode(index int, peers *etcdPeers) (*EtcdNode, error) {
	n := &EtcdNode{name: fmt.Sprintf("etcd%d", index+1), index: index, peers: peers}
	ports, err := freePorts(2)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", n.name, err)
	}
	n.firstPorts = [2]int{ports[0], ports[1]}
	n.direct = etcdAddrs{client: loopback(ports[0]), peer: loopback(ports[1])}
	if n.client, err = newNodeProxy(n.name, n.direct.client); err != nil {
		return nil, err
	}
	if n.peer, err = newNodeProxy(n.name+"-peer", n.direct.peer); err != nil {
		n.client.stop()
		return nil, err
	}
	return n, nil
}

func loopback(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }

// configure creates the member's directory, its clock file when shim is
// set, and its backend.
func (n *EtcdNode) configure(ctx context.Context, p provider, cfg etcdConfig, shim string) error {
	if err := newEtcdDir(cfg); err != nil {
		return fmt.Errorf("%s: %w", n.name, err)
	}
	if shim != "" {
		c, err := newClockFiles(cfg.dir, shim)
		if err != nil {
			return fmt.Errorf("%s: %w", n.name, err)
		}
		cfg.clock = c
	}
	be, err := p.newEtcd(ctx, cfg)
	if err != nil {
		return fmt.Errorf("%s: %w", n.name, err)
	}
	n.cfg, n.backend = cfg, be
	return nil
}

// startBackend starts the member and points the proxies at it. It returns
// once the member listens, before it has joined a quorum.
func (n *EtcdNode) startBackend(ctx context.Context) error {
	addrs, err := n.backend.start(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", n.name, err)
	}
	n.mu.Lock()
	n.direct, n.running, n.paused = addrs, true, false
	n.mu.Unlock()
	if err := errors.Join(n.client.setUpstream(addrs.client), n.peer.setUpstream(addrs.peer)); err != nil {
		return fmt.Errorf("%s: repoint proxies: %w", n.name, err)
	}
	return nil
}

// Name is the member's name in the bed and in etcd: etcd1, etcd2, ...
func (n *EtcdNode) Name() string { return n.name }

// ID is the member's ID in etcd. It stays the same across restarts.
func (n *EtcdNode) ID() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.id
}

// Addr is the host:port clients use: a loopback listener in front of the
// member's client port. etcd's client accepts it as an endpoint as it is.
func (n *EtcdNode) Addr() string { return n.client.addr() }

// PeerURL is the URL the member advertises to the other members: a
// loopback listener in front of its peer port.
func (n *EtcdNode) PeerURL() string { return "http://" + n.peer.addr() }

// DirectAddr is the member's own client address, bypassing the proxy: the
// faults injected with Partition and AddLatency do not apply to it, and it
// may change when the member restarts.
func (n *EtcdNode) DirectAddr() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.direct.client
}

// Pause freezes the member (SIGSTOP, or docker pause): it keeps its
// connections but answers nothing, to clients or peers, until Resume.
func (n *EtcdNode) Pause(ctx context.Context) error {
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

// Resume thaws a paused member.
func (n *EtcdNode) Resume(ctx context.Context) error {
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

// Kill ends the member with SIGKILL. Its data directory stays.
func (n *EtcdNode) Kill(ctx context.Context) error {
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

// Restart starts the member again with its data directory, killing it
// first if it runs: it rejoins the cluster as the same member, behind the
// same addresses. It returns once the member listens; it serves clients
// once it has caught up with a quorum, which WaitReady waits for.
func (n *EtcdNode) Restart(ctx context.Context) error {
	n.restartMu.Lock()
	defer n.restartMu.Unlock()
	if err := n.Kill(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.opts.StartTimeout)
	defer cancel()
	if err := n.startBackend(ctx); err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	return nil
}

// Partition cuts the member off from its clients and from the other
// members, in both directions: its client and peer proxies drop every byte
// and hang their connections, and the other members' peer proxies drop the
// raft connections it opens to them. Heal ends it.
func (n *EtcdNode) Partition(ctx context.Context) error {
	for _, px := range []*nodeProxy{n.client, n.peer} {
		if err := px.heal(ctx); err != nil {
			return fmt.Errorf("%s: partition: %w", n.name, err)
		}
		if err := px.partition(); err != nil {
			return fmt.Errorf("%s: partition: %w", n.name, err)
		}
	}
	if err := n.peers.setCut(n.index, true); err != nil {
		return fmt.Errorf("%s: partition: %w", n.name, err)
	}
	return nil
}

// Heal ends a partition. Connections that lived through it are closed;
// clients and members reconnect.
func (n *EtcdNode) Heal(ctx context.Context) error {
	err := errors.Join(n.client.heal(ctx), n.peer.heal(ctx), n.peers.setCut(n.index, false))
	if err != nil {
		return fmt.Errorf("%s: heal: %w", n.name, err)
	}
	return nil
}

// AddLatency delays by d every reply from the member to its clients and
// every byte it sends to the members that dialed it, which carries its raft
// messages; 0 removes the delay.
func (n *EtcdNode) AddLatency(ctx context.Context, d time.Duration) error {
	if err := errors.Join(n.client.latency(ctx, d), n.peer.latency(ctx, d)); err != nil {
		return fmt.Errorf("%s: latency: %w", n.name, err)
	}
	return nil
}

func (n *EtcdNode) close(ctx context.Context) error {
	n.client.stop()
	n.peer.stop()
	n.mu.Lock()
	paused := n.paused
	be := n.backend
	n.mu.Unlock()
	if be == nil {
		return nil
	}
	var errs []error
	if paused {
		errs = append(errs, be.resume(ctx))
	}
	errs = append(errs, be.close(ctx))
	return errors.Join(errs...)
}
