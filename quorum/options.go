package quorum

import (
	"errors"
	"fmt"
	"time"

	"github.com/quorumlock/quorumlock/lease"
)

// Defaults. Options that depend on the TTL derive from the TTL in effect.
const (
	DefaultTTL         = 10 * time.Second
	DefaultDriftFactor = 0.01
	DefaultMaxWait     = 10 * time.Second
	DefaultBaseDelay   = 10 * time.Millisecond
	DefaultMaxDelay    = 500 * time.Millisecond
	DefaultMaxReaders  = 64 // a read-write lock's concurrent readers (WithMaxReaders)

	maxDefaultNodeTimeout = 250 * time.Millisecond // caps the default TTL/10
)

// Retry bounds the attempts of Lock (and Do). Between attempts Lock sleeps a
// full-jitter exponential backoff: a uniform delay in [0, cap), where cap
// starts at BaseDelay and doubles after every attempt up to MaxDelay.
type Retry struct {
	Attempts  int           // most attempts per call, the first included; 0: no limit (then WithMaxWait > 0)
	BaseDelay time.Duration // first backoff cap, > 0
	MaxDelay  time.Duration // largest backoff cap, >= BaseDelay
}

// Option configures a Locker. New reports every option's error.
type Option func(*config) error

type config struct {
	ttl, nodeTimeout, maxWait, window, watchdog, margin time.Duration
	nodeTimeoutSet, windowSet, watchdogSet, marginSet   bool

	drift    float64
	retry    Retry
	fencer   lease.Fencer
	observer lease.Observer
	guard    bool
	durable  bool
	readers  int
}

func defaultConfig() config {
	return config{
		ttl:      DefaultTTL,
		drift:    DefaultDriftFactor,
		retry:    Retry{Attempts: 0, BaseDelay: DefaultBaseDelay, MaxDelay: DefaultMaxDelay},
		maxWait:  DefaultMaxWait,
		observer: lease.NopObserver{},
		guard:    true,
		readers:  DefaultMaxReaders,
	}
}

// WithTTL sets the lease TTL: the PX of the lock key on every node, also
// used by Do's watchdog to extend. Default 10s, at least 10ms.
func WithTTL(d time.Duration) Option { return func(c *config) error { c.ttl = d; return nil } }

// WithNodeTimeout sets how long one request to one node may take. Default
// min(TTL/10, 250ms). To acquire, then extend: 2*nodeTimeout + TTL*drift + 2ms < TTL.
func WithNodeTimeout(d time.Duration) Option {
	return func(c *config) error { c.nodeTimeout, c.nodeTimeoutSet = d, true; return nil }
}

// WithDriftFactor sets the clock drift allowance as a fraction of the TTL,
// in [0, 0.5). Default 0.01. A lease ends at start + TTL - (TTL*drift + 2ms).
func WithDriftFactor(f float64) Option { return func(c *config) error { c.drift = f; return nil } }

// WithRetry sets how Lock retries. Default: no attempt limit, BaseDelay
// 10ms, MaxDelay 500ms, bounded by WithMaxWait.
func WithRetry(r Retry) Option { return func(c *config) error { c.retry = r; return nil } }

// WithMaxWait bounds the time one Lock (or Do) call spends acquiring (no
// attempt or backoff starts past it); 0: none, then Retry.Attempts > 0. Default 10s.
func WithMaxWait(d time.Duration) Option { return func(c *config) error { c.maxWait = d; return nil } }

// WithFencer makes every lease carry a fence token from f (see lease.Fencer).
func WithFencer(f lease.Fencer) Option {
	return func(c *config) error {
		if f == nil {
			return errors.New("WithFencer: fencer is nil")
		}
		c.fencer = f
		return nil
	}
}

// WithObserver sends events to o (see lease.Observer). Default
// lease.NopObserver.
func WithObserver(o lease.Observer) Option {
	return func(c *config) error {
		if o == nil {
			return errors.New("WithObserver: observer is nil")
		}
		c.observer = o
		return nil
	}
}

// WithAmnesiaGuard turns the restart guard on (the default) or off. With it
// a node votes only once up for the restart window (read atomically with the
// vote), else it answers ErrNodeWarming: Redlock's "delayed restart", after
// which any lease it granted before restarting has expired, whatever it lost.
// A young node votes only if TrustNode vouched for it, or WithDurableNodes.
// Keys a running node drops (FLUSHALL, eviction) are not covered. Turn it off
// only if every node runs appendfsync always and never loses data.
func WithAmnesiaGuard(on bool) Option { return func(c *config) error { c.guard = on; return nil } }

// WithDurableNodes declares that every node persists each write before it
// acknowledges it (appendfsync always): a node inside its window then votes if
// its AOF is on and its marker (BootMarkerKey) survived. Not for everysec or RDB.
func WithDurableNodes(on bool) Option { return func(c *config) error { c.durable = on; return nil } }

// WithAmnesiaWindow sets the restart window: how long after it (re)started a
// node stays out of the vote. It must be at least the longest TTL any lease
// on these nodes can have (here or in Lease.Extend). Default: the TTL.
func WithAmnesiaWindow(d time.Duration) Option {
	return func(c *config) error { c.window, c.windowSet = d, true; return nil }
}

// WithWatchdogInterval sets how often Do extends its lease: default TTL/3 or
// less, so that interval + margin < TTL - 2*nodeTimeout - (TTL*drift + 2ms).
func WithWatchdogInterval(d time.Duration) Option {
	return func(c *config) error { c.watchdog, c.watchdogSet = d, true; return nil }
}

// WithSafetyMargin sets how long before Until Do cancels its function when the
// watchdog could not extend the lease. Default TTL/10; see WithWatchdogInterval.
func WithSafetyMargin(d time.Duration) Option {
	return func(c *config) error { c.margin, c.marginSet = d, true; return nil }
}

// WithMaxReaders sets how many readers a read-write lock admits at once
// (1 to MaxPermits; default DefaultMaxReaders): each reader holds one of
// that many read permits, and a writer takes them all in one vote. Every
// Locker on a lock must agree (RWLock reports a mismatch).
func WithMaxReaders(n int) Option {
	return func(c *config) error {
		if n < 1 || n > MaxPermits {
			return fmt.Errorf("max readers must be 1 to %d, got %d", MaxPermits, n)
		}
		c.readers = n
		return nil
	}
}

// leaseEnd is the end of a lease whose vote (or extension) started at start.
func (c *config) leaseEnd(start time.Time, ttl time.Duration) time.Time {
	return start.Add(validity(ttl, 0, c.drift))
}

// checkTTL is the timing rule for a lease TTL, for WithTTL and Extend alike.
func (c *config) checkTTL(ttl time.Duration) error {
	switch {
	case ttl < 10*time.Millisecond:
		return fmt.Errorf("TTL must be at least 10ms, got %v", ttl)
	case 2*c.nodeTimeout+driftAllowance(ttl, c.drift) >= ttl:
		return fmt.Errorf("TTL %v is too short for the node timeout %v: a lease must be extendable within its validity (2*node timeout + drift allowance %v < TTL)", ttl, c.nodeTimeout, driftAllowance(ttl, c.drift))
	case c.guard && ttl > c.window:
		return fmt.Errorf("TTL %v exceeds the restart window %v", ttl, c.window)
	}
	return nil
}

// problems collects the errors New reports.
type problems []error

func (p *problems) bad(format string, args ...any) { *p = append(*p, fmt.Errorf(format, args...)) }

func (p *problems) need(ok bool, format string, args ...any) {
	if !ok {
		p.bad(format, args...)
	}
}

// resolve fills the derived defaults and records every problem in p.
func (c *config) resolve(p *problems) {
	p.need(c.retry.Attempts >= 0, "retry attempts must be >= 0, got %d", c.retry.Attempts)
	p.need(c.retry.BaseDelay > 0, "retry base delay must be > 0, got %v", c.retry.BaseDelay)
	p.need(c.retry.MaxDelay >= c.retry.BaseDelay, "retry max delay %v must be >= base delay %v", c.retry.MaxDelay, c.retry.BaseDelay)
	p.need(c.maxWait >= 0, "max wait must be >= 0, got %v", c.maxWait)
	p.need(c.retry.Attempts != 0 || c.maxWait != 0, "retry is unbounded: set Retry.Attempts > 0 or WithMaxWait > 0")
	ttlOK, driftOK := c.ttl >= 10*time.Millisecond, c.drift >= 0 && c.drift < 0.5 // NaN is not
	p.need(ttlOK, "TTL must be at least 10ms, got %v", c.ttl)
	p.need(driftOK, "drift factor must be in [0, 0.5), got %v", c.drift)
	if ttlOK && driftOK { // else the timings mean nothing
		c.resolveTiming(p)
	}
}

// resolveTiming derives the unset timings from the TTL and checks them.
func (c *config) resolveTiming(p *problems) {
	c.ttl = c.ttl.Truncate(time.Millisecond) // PX has millisecond granularity
	if !c.nodeTimeoutSet {
		c.nodeTimeout = min(c.ttl/10, maxDefaultNodeTimeout)
	}
	if !c.windowSet {
		c.window = c.ttl
	}
	if !c.marginSet {
		c.margin = c.ttl / 10
	}
	limit := c.ttl - 2*c.nodeTimeout - driftAllowance(c.ttl, c.drift) // time to extend in
	if !c.watchdogSet {
		c.watchdog = min(c.ttl/3, (limit-c.margin)/2)
	}
	switch {
	case c.nodeTimeout <= 0:
		p.bad("node timeout must be > 0, got %v", c.nodeTimeout)
	case c.nodeTimeout >= c.ttl:
		p.bad("node timeout %v must be shorter than the TTL %v", c.nodeTimeout, c.ttl)
	default:
		if err := c.checkTTL(c.ttl); err != nil {
			*p = append(*p, err)
			if !c.watchdogSet {
				return // the derived watchdog means nothing
			}
		}
	}
	p.need(c.margin >= 0, "safety margin must be >= 0, got %v", c.margin)
	switch {
	case c.watchdog <= 0 && !c.watchdogSet:
		p.bad("safety margin %v leaves no time to extend: watchdog interval plus safety margin must stay below %v (TTL - 2*node timeout - drift allowance)", c.margin, limit)
	case c.watchdog <= 0:
		p.bad("watchdog interval must be > 0, got %v", c.watchdog)
	case c.margin >= 0 && c.watchdog+c.margin >= limit:
		p.bad("watchdog interval %v plus safety margin %v leaves no time to extend: they must stay below %v (TTL - 2*node timeout - drift allowance)", c.watchdog, c.margin, limit)
	}
}
