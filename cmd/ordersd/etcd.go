//go:build !noetcd

package main

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/quorumlock/quorumlock/etcdlock"
	"github.com/quorumlock/quorumlock/lease"
)

// openEtcdLock opens the etcd backend: a client of ORDERS_ETCD_ENDPOINTS
// and a Locker on it.
func (d *deps) openEtcdLock(cfg config, fences lease.Fencer, obs lease.Observer, closers *cleanups) error {
	// Keep-alive pings drop a frozen member's connection within 4s.
	cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.etcdEndpoints, DialTimeout: 2 * time.Second,
		DialKeepAliveTime: 2 * time.Second, DialKeepAliveTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	closers.add(func() { _ = cli.Close() })
	opts := []etcdlock.Option{etcdlock.WithTTL(cfg.lockTTL), etcdlock.WithMaxWait(cfg.lockWait),
		etcdlock.WithFencer(fences), etcdlock.WithObserver(obs)}
	if cfg.nodeTimeout > 0 {
		opts = append(opts, etcdlock.WithNodeTimeout(cfg.nodeTimeout))
	}
	locker, err := etcdlock.New(cli, opts...)
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	closers.add(func() { _ = locker.Close() })
	d.lock = locker
	d.etcdUp = func(ctx context.Context) error {
		_, err := cli.Get(clientv3.WithRequireLeader(ctx), "quorumlock/readyz", clientv3.WithCountOnly())
		return err
	}
	return nil
}
