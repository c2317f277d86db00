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
	window      time.Duration
	watchdog    time.Duration

	nodeTimeoutSet, windowSet, watchdogSet bool
	fencerNil, observerNil                 bool
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
// in [0, 0.5). Default 0.01. The validity of a lease is
// TTL - elapsed - (TTL*drift + 2ms).
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

// WithAmnesiaGuard turns the amnesia guard on (the default) or off.
//
// With the guard on, a node that has no marker key (BootMarkerKey) — because
// it restarted without its data, or is brand new — does not vote until the
// amnesia window has passed on its own clock since the marker was stamped.
// This is the "delayed restart" that Redlock needs when nodes do not persist
// every write. Turn it off only when every node runs with appendfsync always
// (see the package documentation).
func WithAmnesiaGuard(on bool) Option { return func(c *config) { c.guard = on } }

// WithAmnesiaWindow sets how long a node without data stays out of the vote.
// It must be at least the longest TTL any lease on these nodes can have (a
// lease's TTL here, or in Lease.Extend). Default: the TTL.
func WithAmnesiaWindow(d time.Duration) Option {
	return func(c *config) { c.window, c.windowSet = d, true }
}

// WithWatchdogInterval sets how often Do extends its lease. Default TTL/3
// (or less when a long node timeout requires it). It must leave time for an
// extension before the validity runs out:
// interval < TTL - 2*nodeTimeout - (TTL*drift + 2ms).
func WithWatchdogInterval(d time.Duration) Option {
	return func(c *config) { c.watchdog, c.watchdogSet = d, true }
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

	ttlOK := c.ttl >= 10*time.Millisecond
	if !ttlOK {
		bad("TTL must be at least 10ms, got %v", c.ttl)
	}
	driftOK := !math.IsNaN(c.drift) && c.drift >= 0 && c.drift < 0.5
	if !driftOK {
		bad("drift factor must be in [0, 0.5), got %v", c.drift)
	}
	if !ttlOK || !driftOK {
		return errors.Join(errs...) // the remaining checks depend on both
	}
	c.ttl = c.ttl.Truncate(time.Millisecond) // PX has millisecond granularity
	if !c.nodeTimeoutSet {
		c.nodeTimeout = min(c.ttl/10, maxDefaultNodeTimeout)
	}
	if !c.windowSet {
		c.window = c.ttl
	}
	allowance := driftAllowance(c.ttl, c.drift)
	if !c.watchdogSet {
		c.watchdog = min(c.ttl/3, (c.ttl-2*c.nodeTimeout-allowance)/2)
	}
	switch {
	case c.nodeTimeout <= 0:
		bad("node timeout must be > 0, got %v", c.nodeTimeout)
	case c.nodeTimeout >= c.ttl:
		bad("node timeout %v must be shorter than the TTL %v", c.nodeTimeout, c.ttl)
	case 2*c.nodeTimeout+allowance >= c.ttl:
		bad("node timeout %v is too long for the TTL %v: a lease must be extendable within its validity (2*node timeout + drift allowance %v < TTL)", c.nodeTimeout, c.ttl, allowance)
	}
	if c.guard && c.window < c.ttl {
		bad("amnesia window %v must be at least the TTL %v", c.window, c.ttl)
	}
	if c.watchdog <= 0 {
		bad("watchdog interval must be > 0, got %v", c.watchdog)
	} else if limit := c.ttl - 2*c.nodeTimeout - allowance; c.watchdog >= limit {
		bad("watchdog interval %v leaves no time to extend: it must be below %v (TTL - 2*node timeout - drift allowance)", c.watchdog, limit)
	}
	return errors.Join(errs...)
}
