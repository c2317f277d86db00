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

	// maxDefaultNodeTimeout caps the default node timeout, which is
	// otherwise TTL/10.
	maxDefaultNodeTimeout = 250 * time.Millisecond
)

// Retry bounds the attempts of Lock (and Do). Between attempts Lock sleeps a
// full-jitter exponential backoff: a uniform delay in [0, cap), where cap
// starts at BaseDelay and doubles after every attempt up to MaxDelay.
// Together with WithMaxWait and the context, it bounds how long Lock waits.
type Retry struct {
	// Attempts is the maximum number of attempts per call, the first one
	// included. 0 means no limit on the count (WithMaxWait must then be > 0).
	Attempts  int
	BaseDelay time.Duration // first backoff cap, > 0
	MaxDelay  time.Duration // largest backoff cap, >= BaseDelay
}

// Option configures a Locker.
type Option func(*config)

type config struct {
	ttl         time.Duration
	nodeTimeout time.Duration
	drift       float64
	retry       Retry
	maxWait     time.Duration
	fencer      Fencer
	observer    Observer
	guard       bool
	durable     bool
	window      time.Duration
	watchdog    time.Duration
	margin      time.Duration

	nodeTimeoutSet, windowSet, watchdogSet, marginSet bool
	fencerNil, observerNil                            bool
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

// WithTTL sets the lease TTL: the PX of the lock key on every node, and
// the TTL used by Do's watchdog to extend. Default 10s. Must be at least 10ms.
func WithTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithNodeTimeout sets how long one request to one node may take. Default
// min(TTL/10, 250ms): long enough for a node that fsyncs every write
// (appendfsync always) under load, short enough that a dead node costs
// little, since an acquire returns as soon as a majority has answered. It
// must leave room to acquire and then extend within the validity:
// 2*nodeTimeout + TTL*drift + 2ms < TTL.
func WithNodeTimeout(d time.Duration) Option {
	return func(c *config) { c.nodeTimeout, c.nodeTimeoutSet = d, true }
}

// WithDriftFactor sets the clock drift allowance as a fraction of the TTL,
// in [0, 0.5). Default 0.01. A lease ends at start + TTL - (TTL*drift + 2ms),
// where start is taken before the first request left (so the time the vote
// took is already inside it).
func WithDriftFactor(f float64) Option { return func(c *config) { c.drift = f } }

// WithRetry sets how Lock retries. Default: no attempt limit, BaseDelay
// 10ms, MaxDelay 500ms, bounded by WithMaxWait.
func WithRetry(r Retry) Option { return func(c *config) { c.retry = r } }

// WithMaxWait bounds the time one Lock (or Do) call spends acquiring,
// retries included: no attempt starts (and no backoff sleeps) past it, and
// an attempt already running ends within one node timeout. 0 means no time
// bound (Retry.Attempts must then be > 0). Default 10s. The context can
// always end it sooner.
func WithMaxWait(d time.Duration) Option { return func(c *config) { c.maxWait = d } }

// WithFencer makes every lease carry a fence token from f (see Fencer).
func WithFencer(f Fencer) Option {
	return func(c *config) { c.fencer, c.fencerNil = f, f == nil }
}

// WithObserver sends events to o (see Observer). Default NopObserver.
func WithObserver(o Observer) Option {
	return func(c *config) { c.observer, c.observerNil = o, o == nil }
}

// WithAmnesiaGuard turns the restart guard on (the default) or off.
//
// With the guard on, a node votes only once it has been up for the restart
// window (WithAmnesiaWindow), measured on its own clock and read in the same
// script as the vote (its uptime); until then it answers ErrNodeWarming.
// This is Redlock's "delayed restart": any lease the node granted before it
// restarted has expired by then, whatever the node kept of its data, so a
// restart from an old snapshot or a lost AOF tail cannot cause a double
// grant. Nodes that have been up for longer than the window vote at once,
// also on first contact. Two exceptions let a young node vote: TrustNode
// (an operator vouches for the running process) and WithDurableNodes.
//
// Turn it off only when every node runs with appendfsync always and no
// client may ever see a node that lost data; WithDurableNodes is the
// safer way to skip the wait after clean restarts.
func WithAmnesiaGuard(on bool) Option { return func(c *config) { c.guard = on } }

// WithDurableNodes declares that every node persists each write before it
// acknowledges it (appendonly yes, appendfsync always). With the guard on, a
// node inside its restart window then votes when its AOF is on and its
// restart marker (BootMarkerKey, written once the node is past the window)
// survived the restart, which shows it kept its data. A node that came back
// without its data has no marker and waits out the window. Declaring it for
// nodes that use appendfsync everysec or RDB snapshots is unsafe. Default
// false.
func WithDurableNodes(on bool) Option { return func(c *config) { c.durable = on } }

// WithAmnesiaWindow sets the restart window: how long after it (re)started a
// node stays out of the vote. It must be at least the longest TTL any lease
// on these nodes can have (a lease's TTL here, or in Lease.Extend). Default:
// the TTL.
func WithAmnesiaWindow(d time.Duration) Option {
	return func(c *config) { c.window, c.windowSet = d, true }
}

// WithWatchdogInterval sets how often Do extends its lease. Default TTL/3
// (or less when a long node timeout requires it). It must leave time for an
// extension before the safety margin begins:
// interval + margin < TTL - 2*nodeTimeout - (TTL*drift + 2ms).
func WithWatchdogInterval(d time.Duration) Option {
	return func(c *config) { c.watchdog, c.watchdogSet = d, true }
}

// WithSafetyMargin sets how long before a lease's Until Do cancels its
// function's context when the watchdog could not extend the lease, so the
// function stops touching the resource while the lease is still valid.
// Default TTL/10. It must leave room for an extension:
// watchdog interval + margin < TTL - 2*nodeTimeout - (TTL*drift + 2ms).
func WithSafetyMargin(d time.Duration) Option {
	return func(c *config) { c.margin, c.marginSet = d, true }
}

// leaseEnd is the end of a lease whose vote (or extension) started at start
// with ttl: start + ttl - (ttl*drift + 2ms). start is taken before the first
// request leaves, so the elapsed time is already accounted for.
func (c *config) leaseEnd(start time.Time, ttl time.Duration) time.Time {
	return start.Add(validity(ttl, 0, c.drift))
}

// checkTTL is the one timing rule for a lease TTL, for WithTTL and for
// Lease.Extend alike: at least 10ms, room to acquire (or extend) and then
// extend again within the validity (2*nodeTimeout + drift allowance < TTL),
// and, with the guard on, no longer than the restart window.
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

// resolve fills the derived defaults and validates the configuration,
// naming every problem it finds.
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
	if c.fencerNil {
		bad("WithFencer: fencer is nil")
	}
	if c.observerNil {
		bad("WithObserver: observer is nil")
	}

	if c.ttl < 10*time.Millisecond {
		bad("TTL must be at least 10ms, got %v", c.ttl)
	}
	driftOK := !math.IsNaN(c.drift) && c.drift >= 0 && c.drift < 0.5
	if !driftOK {
		bad("drift factor must be in [0, 0.5), got %v", c.drift)
	}
	if c.ttl < 10*time.Millisecond || !driftOK {
		return errors.Join(errs...) // the remaining checks depend on both
	}
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
	allowance := driftAllowance(c.ttl, c.drift)
	limit := c.ttl - 2*c.nodeTimeout - allowance // time to extend in
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
				return errors.Join(errs...) // the derived watchdog means nothing
			}
		}
	}
	if c.margin < 0 {
		bad("safety margin must be >= 0, got %v", c.margin)
	}
	if c.watchdog <= 0 && !c.watchdogSet {
		bad("safety margin %v leaves no time to extend: watchdog interval plus safety margin must stay below %v (TTL - 2*node timeout - drift allowance)", c.margin, limit)
	} else if c.watchdog <= 0 {
		bad("watchdog interval must be > 0, got %v", c.watchdog)
	} else if c.margin >= 0 && c.watchdog+c.margin >= limit {
		bad("watchdog interval %v plus safety margin %v leaves no time to extend: they must stay below %v (TTL - 2*node timeout - drift allowance)", c.watchdog, c.margin, limit)
	}
	return errors.Join(errs...)
}
