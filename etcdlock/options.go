package etcdlock

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/quorumlock/quorumlock/lease"
)

// Option configures a Locker. Options that share a name with quorum's mean
// the same thing.
type Option func(*config) error

type config struct {
	ttl         time.Duration
	nodeTimeout time.Duration
	maxWait     time.Duration
	drift       float64
	margin      time.Duration
	prefix      string
	fencer      lease.Fencer
	observer    lease.Observer
}

func defaultConfig() config {
	return config{ttl: 10 * time.Second, drift: 0.01, maxWait: 10 * time.Second, prefix: "quorumlock/",
		observer: lease.NopObserver{}}
}

// WithTTL sets the session lease's TTL (default 10s): how long the locks of
// a client that stopped keeping its session alive outlive it. etcd counts
// TTLs in whole seconds: it is rounded up, and must be at least 2s.
func WithTTL(d time.Duration) Option { return func(c *config) error { c.ttl = d; return nil } }

// WithNodeTimeout bounds each etcd call that is not a wait for the lock:
// Unlock, Extend, opening a session (default min(TTL/10, 1s)).
func WithNodeTimeout(d time.Duration) Option {
	return func(c *config) error { c.nodeTimeout = d; return nil }
}

// WithMaxWait bounds one Lock call, its wait for the predecessors included
// (default 10s); past it Lock fails with an error matching
// lease.ErrNotAcquired.
func WithMaxWait(d time.Duration) Option { return func(c *config) error { c.maxWait = d; return nil } }

// WithDriftFactor sets the share of the TTL that Until leaves for clock
// drift (default 0.01), plus 2ms.
func WithDriftFactor(f float64) Option { return func(c *config) error { c.drift = f; return nil } }

// WithSafetyMargin sets how long before Until Do cancels its function when
// no keep-alive got through (default TTL/10).
func WithSafetyMargin(d time.Duration) Option {
	return func(c *config) error { c.margin = d; return nil }
}

// WithPrefix sets the etcd key prefix of the locks (default "quorumlock/"):
// a lock on key k waits under prefix + k + "/".
func WithPrefix(p string) Option { return func(c *config) error { c.prefix = p; return nil } }

// WithFencer replaces the revision fence with f's tokens (see the package
// documentation): for a resource that writers without the lock also write.
func WithFencer(f lease.Fencer) Option {
	return func(c *config) error {
		if f == nil {
			return errors.New("etcdlock: WithFencer: nil Fencer")
		}
		c.fencer = f
		return nil
	}
}

// WithObserver reports acquisitions, extensions, releases and losses to o,
// with package lease's event types (so quorum/quorumprom's metrics serve
// etcdlock too); Attempts counts one per Lock call, Wakeups none, and it
// sends no NodeEvent (the etcd client fails over between members itself).
func WithObserver(o lease.Observer) Option {
	return func(c *config) error {
		if o == nil {
			return errors.New("etcdlock: WithObserver: nil Observer")
		}
		c.observer = o
		return nil
	}
}

// resolve checks the configuration and fills in the defaults.
func (c *config) resolve() error {
	switch {
	case c.ttl < 2*time.Second:
		return fmt.Errorf("etcdlock: TTL %v is below etcd's 2s minimum", c.ttl)
	case c.ttl > time.Duration(math.MaxInt32)*time.Second:
		return fmt.Errorf("etcdlock: TTL %v is too long", c.ttl)
	case c.drift < 0 || c.drift >= 0.5:
		return fmt.Errorf("etcdlock: drift factor %v outside [0, 0.5)", c.drift)
	case c.maxWait < 0 || c.nodeTimeout < 0 || c.margin < 0:
		return errors.New("etcdlock: negative duration")
	case c.prefix == "":
		return errors.New("etcdlock: empty prefix")
	}
	c.ttl = (c.ttl + time.Second - 1).Truncate(time.Second)
	if c.nodeTimeout == 0 {
		c.nodeTimeout = min(c.ttl/10, time.Second)
	}
	if c.margin == 0 {
		c.margin = c.ttl / 10
	}
	if c.margin >= c.ttl/2 {
		return fmt.Errorf("etcdlock: safety margin %v must be under half the TTL %v", c.margin, c.ttl)
	}
	return nil
}

// allowance is the drift allowance of the TTL.
func (c *config) allowance() time.Duration {
	return time.Duration(float64(c.ttl)*c.drift) + 2*time.Millisecond
}
