package chaos

import (
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/etcdbed"
	"github.com/quorumlock/quorumlock/etcdlock"
	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/quorum"
)

// The locks the workload runs on (Scenario.Lock, WorkerConfig.Lock).
const (
	// LockQuorum is package quorum's Redlock on the bed's 5 Redis masters,
	// fenced with tokens from the Postgres issuer (quorum.WithFencer).
	LockQuorum = "quorum"
	// LockEtcd is package etcdlock on the bed's 3-member etcd cluster,
	// fenced with the etcd revision at which the lease became the owner.
	LockEtcd = "etcdlock"
)

// Locks lists the locks, in the order of the table.
var Locks = []string{LockQuorum, LockEtcd}

// etcdPrefix is the key prefix of the workers' etcd locks.
const etcdPrefix = "chaos/"

// wallUntil is the validity end of l on the wall clock that the processes
// share, in Unix nanoseconds.
func wallUntil(l lease.Lease) int64 { return time.Now().Add(time.Until(l.Until())).UnixNano() }

// hasServers reports whether cfg names the servers of its lock.
func (cfg WorkerConfig) hasServers() bool {
	if cfg.Lock == LockEtcd {
		return len(cfg.Etcd) > 0
	}
	return len(cfg.Redis) > 0 && (cfg.Lock == "" || cfg.Lock == LockQuorum)
}

func (cfg WorkerConfig) nodeTimeout() time.Duration {
	if cfg.NodeTimeout > 0 {
		return cfg.NodeTimeout
	}
	return cfg.TTL / 10
}

// newLocker builds the worker's locker on clients of its own; closing it
// closes the locker, then the clients. fencer issues quorum's fences; an
// etcd lease's fence is its revision.
func newLocker(cfg WorkerConfig, fencer lease.Fencer) (lease.Locker, func(), error) {
	if cfg.Lock == LockEtcd {
		return newEtcdLocker(cfg)
	}
	clients := make([]redis.UniversalClient, len(cfg.Redis))
	for i, a := range cfg.Redis {
		clients[i] = redis.NewClient(testbed.ClientOptions(a))
	}
	closeClients := func() {
		for i := len(clients) - 1; i >= 0; i-- {
			_ = clients[i].Close()
		}
	}
	l, err := quorum.New(clients, quorum.WithTTL(cfg.TTL), quorum.WithNodeTimeout(cfg.nodeTimeout()),
		quorum.WithFencer(fencer), quorum.WithAmnesiaGuard(cfg.Guard), quorum.WithAmnesiaWindow(cfg.TTL),
		quorum.WithMaxWait(2*cfg.TTL))
	if err != nil {
		closeClients()
		return nil, nil, err
	}
	return l, func() { _ = l.Close(); closeClients() }, nil
}

// newEtcdLocker builds an etcdlock Locker on a client of every member, as
// the bed recommends it (etcdbed.Config).
func newEtcdLocker(cfg WorkerConfig) (lease.Locker, func(), error) {
	cli, err := clientv3.New(etcdbed.Config(cfg.Etcd...))
	if err != nil {
		return nil, nil, err
	}
	l, err := etcdlock.New(cli, etcdlock.WithTTL(cfg.TTL), etcdlock.WithNodeTimeout(cfg.nodeTimeout()),
		etcdlock.WithMaxWait(2*cfg.TTL), etcdlock.WithPrefix(etcdPrefix))
	if err != nil {
		_ = cli.Close()
		return nil, nil, err
	}
	return l, func() { _ = l.Close(); _ = cli.Close() }, nil
}
