// Package etcdbed gives tests, and tools that need them, official etcd
// clients (go.etcd.io/etcd/client/v3) of a test bed's etcd members.
//
// It is apart from devtools/testbed so that the bed's core, and every
// binary and test that links it, compiles neither etcd's client nor gRPC:
// the core reaches its members through etcd's HTTP JSON gateway. Only code
// that imports this package pays for them.
package etcdbed

import (
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/quorumlock/quorumlock/devtools/testbed"
)

// Config is the etcd client configuration the bed recommends for the
// given endpoints: a short dial timeout, keep-alive pings that drop a
// frozen member's connection, no logging, and no endpoint
// discovery (the members advertise their proxies, but a test chooses which
// of them a client talks to). Every call should carry a context deadline.
func Config(endpoints ...string) clientv3.Config {
	return clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 2 * time.Second,
		// A frozen member answers no keep-alive ping: its connection is
		// dropped within 4s and calls go to the others.
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		Logger:               zap.NewNop(),
	}
}

// Client returns a new client of every etcd member of b, through the
// proxies (b.EtcdEndpoints), with Config. The caller closes it.
func Client(b *testbed.Bed) (*clientv3.Client, error) {
	if len(b.Etcd) == 0 {
		return nil, errors.New("etcdbed: the bed has no etcd members (set Options.Etcd)")
	}
	c, err := clientv3.New(Config(b.EtcdEndpoints()...))
	if err != nil {
		return nil, fmt.Errorf("etcdbed: etcd client: %w", err)
	}
	return c, nil
}

// Admin returns a new client of member n alone that talks to it directly
// (n.DirectAddr), bypassing its proxy and the faults injected there. The
// address may change when the member restarts: take a new client then.
// The caller closes it.
func Admin(n *testbed.EtcdNode) (*clientv3.Client, error) {
	c, err := clientv3.New(Config(n.DirectAddr()))
	if err != nil {
		return nil, fmt.Errorf("etcdbed: %s: etcd client: %w", n.Name(), err)
	}
	return c, nil
}
