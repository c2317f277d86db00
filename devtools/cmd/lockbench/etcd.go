package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/etcdbed"
	"github.com/quorumlock/quorumlock/etcdlock"
)

// etcdMembers is the size of the etcd cluster of the bed lockbench starts.
const etcdMembers = 3

// minEtcdTTL is etcd's shortest lease TTL, which etcdlock enforces.
const minEtcdTTL = 2 * time.Second

// defaultEtcdTTL is the -etcd-ttl default: ordersd's lock TTL. The etcd
// contender does not take -ttl (2s by default), because an etcdlock
// session of 2s or 3s ends on its own even when idle: etcd's client sends
// a keep-alive at the first 500ms tick after TTL/3 has passed (every 1s
// for 2s, 1.5s for 3s), while etcdlock counts a session valid only until
// the answer before the last one plus the TTL, which two such intervals
// overrun. The TTL costs an uncontended lock nothing otherwise: it is how
// long a dead client's locks outlive it.
const defaultEtcdTTL = 5 * time.Second

// etcdTTL is the session TTL of the etcd contender for -ttl d: etcd counts
// lease TTLs in whole seconds, and etcdlock rounds up.
func etcdTTL(d time.Duration) time.Duration {
	return (d + time.Second - 1).Truncate(time.Second)
}

// newEtcdLocker is the etcd contender's Locker on cli: -etcd-ttl, and the
// node timeout (when set) and the contended wait of the quorum contenders.
func newEtcdLocker(cli *clientv3.Client, cfg config) (*etcdlock.Locker, error) {
	if cli == nil {
		return nil, errors.New("no etcd client")
	}
	opts := []etcdlock.Option{etcdlock.WithTTL(cfg.etcdTTL), etcdlock.WithMaxWait(contendedMaxWait)}
	if cfg.timeout > 0 {
		opts = append(opts, etcdlock.WithNodeTimeout(cfg.timeout))
	}
	return etcdlock.New(cli, opts...)
}

// openEtcd opens a client of the etcd members at addrs, with the options
// the bed recommends (no endpoint discovery: it talks to addrs only).
func openEtcd(addrs []string) (*clientv3.Client, error) {
	cli, err := clientv3.New(etcdbed.Config(addrs...))
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	return cli, nil
}

// etcdFollower returns the bed's etcd member that the fault scenarios slow
// down or freeze: the last member that is not the leader. A Redlock fault
// hits one of N equal nodes, which the majority outvotes; the nearest etcd
// fault is a follower's (the leader's would be a failover, another test).
func etcdFollower(ctx context.Context, bed *testbed.Bed) (*testbed.EtcdNode, error) {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	leader, err := bed.EtcdLeader(lctx)
	if err != nil {
		return nil, err
	}
	for i := len(bed.Etcd) - 1; i >= 0; i-- {
		if n := bed.Etcd[i]; n != leader {
			return n, nil
		}
	}
	return nil, errors.New("the etcd cluster has no follower")
}
