package countersem

import (
	"errors"
	"fmt"
	"time"
)

// Option configures a Semaphore.
type Option func(*config) error

type config struct {
	ttl         time.Duration
	nodeTimeout time.Duration
	maxWait     time.Duration
	retryDelay  time.Duration
	sendDelay   func(node int) time.Duration
}

func defaults() config {
	return config{ttl: 10 * time.Second, nodeTimeout: 100 * time.Millisecond, maxWait: 10 * time.Second, retryDelay: 50 * time.Millisecond}
}

func positive(name string, d time.Duration, set func()) error {
	if d <= 0 {
		return fmt.Errorf("countersem: %s %v, want > 0", name, d)
	}
	set()
	return nil
}

// WithTTL sets how long a node keeps a holder it admitted (default 10s).
func WithTTL(d time.Duration) Option {
	return func(c *config) error { return positive("ttl", d, func() { c.ttl = d }) }
}

// WithNodeTimeout bounds each call to one node (default 100ms).
func WithNodeTimeout(d time.Duration) Option {
	return func(c *config) error { return positive("node timeout", d, func() { c.nodeTimeout = d }) }
}

// WithMaxWait bounds how long Acquire retries while the semaphore is full
// (default 10s).
func WithMaxWait(d time.Duration) Option {
	return func(c *config) error { return positive("max wait", d, func() { c.maxWait = d }) }
}

// WithRetryDelay sets the pause between Acquire's attempts (default 50ms).
func WithRetryDelay(d time.Duration) Option {
	return func(c *config) error { return positive("retry delay", d, func() { c.retryDelay = d }) }
}

// WithSendDelay makes each attempt wait delay(i) before it sends its
// request to node i (the requests still go out concurrently). It is for
// tests: a few random microseconds per node make the nodes see racing
// acquirers in different orders, as the network does between machines.
// Each attempt calls delay once per node, from the attempt's goroutine.
func WithSendDelay(delay func(node int) time.Duration) Option {
	return func(c *config) error {
		if delay == nil {
			return errors.New("countersem: nil send delay")
		}
		c.sendDelay = delay
		return nil
	}
}
