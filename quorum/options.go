package quorum

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Defaults. Options that depend on the TTL derive from the TTL in effect.
const (
	DefaultTTL         = 10 * time.Second
	DefaultDriftFactor = 0.01
	DefaultMaxWait     = 10 * time.Second
	DefaultBaseDelay   = 10 * time.Millisecond
	DefaultMaxDelay    = 500 * time.Millisecond

	maxDefaultNodeTimeout = 250 * time.Millisecond // caps the default TTL/10
)

// Retry bounds the attempts of Lock (and Do). Between attempts Lock sleeps a
// full-jitter exponential backoff: a uniform delay in [0, cap), where cap
// starts at BaseDelay and doubles after every attempt up to MaxDelay.
type Retry struct {
	// Attempts is the most attempts per call, the first included; 0 means
	// no limit on the count (WithMaxWait must then be > 0).
	Attempts  int
	BaseDelay time.Duration // first backoff cap, > 0
	MaxDelay  time.Duration // largest backoff cap, >= BaseDelay
}

// Option configures a Locker. New reports every option's error, and those
// of the checks across options.
type Option func(*config) error

type config struct {
	ttl, nodeTimeout, maxWait, window, watchdog, margin time.Duration
	nodeTimeoutSet, windowSet, watchdogSet, marginSet   bool

	drift    float64
	retry    Retry
	fencer   Fencer
	observer Observer
	guard    bool
	durable  bool
}

func defaultConfig() config {
	return config{
		ttl:      DefaultTTL,
		drift:    DefaultDriftFactor,
		retry:    Retry{Attempts: 0, BaseDelay: DefaultBaseDelay, MaxDelay: DefaultMaxDelay},
		maxWait:  DefaultMaxWait,
		observer: NopObserver{},
		guard:    true,
	}
}

// WithTTL sets the lease TTL: the PX of the lock key on every node, also
// used by Do's watchdog to extend. Default 10s, at least 10ms.
func WithTTL(d time.Duration) Option { return func(c *config) error { c.ttl = d; return nil } }

// WithNodeTimeout sets how long one request to one node may take. Default
// min(TTL/10, 250ms). It must leave room to acquire and then extend within
// the validity: 2*nodeTimeout + TTL*drift + 2ms < TTL.
func WithNodeTimeout(d time.Duration) Option {
	return func(c *config) error { c.nodeTimeout, c.nodeTimeoutSet = d, true; return nil }
}

// WithDriftFactor sets the clock drift allowance as a fraction of the TTL,
// in [0, 0.5). Default 0.01. A lease ends at start + TTL - (TTL*drift + 2ms),
// start taken before the first request left.
func WithDriftFactor(f float64) Option { return func(c *config) error { c.drift = f; return nil } }

// WithRetry sets how Lock retries. Default: no attempt limit, BaseDelay
// 10ms, MaxDelay 500ms, bounded by WithMaxWait.
func WithRetry(r Retry) Option { return func(c *config) error { c.retry = r; return nil } }

// WithMaxWait bounds the time one Lock (or Do) call spends acquiring: no
// attempt or backoff starts past it. 0 means no bound (Retry.Attempts must
// then be > 0). Default 10s.
func WithMaxWait(d time.Duration) Option { return func(c *config) error { c.maxWait = d; return nil } }

// WithFencer makes every lease carry a fence token from f (see Fencer).
func WithFencer(f Fencer) Option {
	return func(c *config) error {
		if f == nil {
			return errors.New("WithFencer: fencer is nil")
		}
		c.fencer = f
		return nil
	}
}

// WithObserver sends events to o (see Observer). Default NopObserver.
func WithObserver(o Observer) Option {
	return func(c *config) error {
		if o == nil {
			return errors.New("WithObserver: observer is nil")
		}
		c.observer = o
		return nil
	}
}

// WithAmnesiaGuard turns the restart guard on (the default) or off. With
// it, a node votes only once it has been up for the restart window, read
// atomically with the vote; until then it answers ErrNodeWarming. This is
// Redlock's "delayed restart": any lease the node granted before it
// restarted has expired by then, whatever data it lost. A young node votes
// only when TrustNode vouched for it, or with WithDurableNodes. Keys a
// running node drops (FLUSHALL, eviction) are not covered. Turn it off
// only when every node runs appendfsync always and never loses data.
func WithAmnesiaGuard(on bool) Option { return func(c *config) error { c.guard = on; return nil } }

// WithDurableNodes declares that every node persists each write before it
// acknowledges it (appendfsync always): a node inside its restart window
// then votes when its AOF is on and its restart marker (BootMarkerKey)
// survived. Unsafe for appendfsync everysec or RDB snapshots. Default false.
func WithDurableNodes(on bool) Option { return func(c *config) error { c.durable = on; return nil } }

// WithAmnesiaWindow sets the restart window: how long after it (re)started a
// node stays out of the vote. It must be at least the longest TTL any lease
// on these nodes can have (here or in Lease.Extend). Default: the TTL.
func WithAmnesiaWindow(d time.Duration) Option {
	return func(c *config) error { c.window, c.windowSet = d, true; return nil }
}

// WithWatchdogInterval sets how often Do extends its lease. Default TTL/3,
// or less if need be. It must leave time for an extension:
// interval + margin < TTL - 2*nodeTimeout - (TTL*drift + 2ms).
func WithWatchdogInterval(d time.Duration) Option {
	return func(c *config) error { c.watchdog, c.watchdogSet = d, true; return nil }
}

// WithSafetyMargin sets how long before a lease's Until Do cancels its
// function's context when the watchdog could not extend the lease, so the
// function stops while the lease is still valid. Default TTL/10; see
// WithWatchdogInterval for the rule they obey together.
func WithSafetyMargin(d time.Duration) Option {
	return func(c *config) error { c.margin, c.marginSet = d, true; return nil }
}

// leaseEnd is the end of a lease whose vote (or extension) started at start
// with ttl: start + ttl - (ttl*drift + 2ms).
func (c *config) leaseEnd(start time.Time, ttl time.Duration) time.Time {
	return start.Add(validity(ttl, 0, c.drift))
}

// checkTTL is the one timing rule for a lease TTL, for WithTTL and
// Lease.Extend alike: at least 10ms, room to acquire and then extend within
// the validity, and with the guard on no longer than the restart window.
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

// resolve fills the derived defaults and names every problem it finds.
func (c *config) resolve() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.retry.Attempts < 0 {
		bad("retry attempts must be >= 0, got %d", c.retry.Attempts)
	}
	if c.retry.BaseDelay <= 0 {
		bad("retry base delay must be > 0, got %v", c.retry.BaseDelay)
	}
	if c.retry.MaxDelay < c.retry.BaseDelay {
		bad("retry max delay %v must be >= base delay %v", c.retry.MaxDelay, c.retry.BaseDelay)
	}
	if c.maxWait < 0 {
		bad("max wait must be >= 0, got %v", c.maxWait)
	}
	if c.retry.Attempts == 0 && c.maxWait == 0 {
		bad("retry is unbounded: set Retry.Attempts > 0 or WithMaxWait > 0")
	}
	if c.ttl < 10*time.Millisecond {
		bad("TTL must be at least 10ms, got %v", c.ttl)
	}
	if math.IsNaN(c.drift) || c.drift < 0 || c.drift >= 0.5 {
		bad("drift factor must be in [0, 0.5), got %v", c.drift)
	}
	if c.ttl >= 10*time.Millisecond && c.drift >= 0 && c.drift < 0.5 { // else meaningless
		c.resolveTiming(bad)
	}
	return errors.Join(errs...)
}

// resolveTiming derives the timings not set from the TTL, and checks that
// they leave time to acquire and to extend.
func (c *config) resolveTiming(bad func(format string, args ...any)) {
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
		bad("node timeout must be > 0, got %v", c.nodeTimeout)
	case c.nodeTimeout >= c.ttl:
		bad("node timeout %v must be shorter than the TTL %v", c.nodeTimeout, c.ttl)
	default:
		if err := c.checkTTL(c.ttl); err != nil {
			bad("%v", err)
			if !c.watchdogSet {
				return // the derived watchdog means nothing
			}
		}
	}
	if c.margin < 0 {
		bad("safety margin must be >= 0, got %v", c.margin)
	}
	switch {
	case c.watchdog <= 0 && !c.watchdogSet:
		bad("safety margin %v leaves no time to extend: watchdog interval plus safety margin must stay below %v (TTL - 2*node timeout - drift allowance)", c.margin, limit)
	case c.watchdog <= 0:
		bad("watchdog interval must be > 0, got %v", c.watchdog)
	case c.margin >= 0 && c.watchdog+c.margin >= limit:
		bad("watchdog interval %v plus safety margin %v leaves no time to extend: they must stay below %v (TTL - 2*node timeout - drift allowance)", c.watchdog, c.margin, limit)
	}
}
