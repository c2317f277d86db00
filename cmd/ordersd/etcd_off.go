//go:build noetcd

package main

import (
	"errors"

	"github.com/quorumlock/quorumlock/lease"
)

// openEtcdLock refuses: this ordersd was built without the etcd backend
// (-tags noetcd, as make demo builds it, sparing the build etcd's client
// and gRPC).
func (d *deps) openEtcdLock(config, lease.Fencer, lease.Observer, *cleanups) error {
	return errors.New("ORDERS_LOCK_BACKEND=etcd: this ordersd was built with -tags noetcd, without the etcd backend; build it without that tag")
}
