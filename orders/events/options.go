package events

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/quorumlock/quorumlock/internal/failpoint"
	"github.com/quorumlock/quorumlock/internal/option"
)

// Defaults of the relay and the consumers.
const (
	DefaultMaxLen       = 1_000_000              // stream entries kept, roughly (MAXLEN ~)
	DefaultBatch        = 100                    // rows per relay transaction, messages per read
	DefaultInterval     = 200 * time.Millisecond // relay poll period when the outbox is empty
	DefaultBlock        = time.Second            // how long a consumer read waits for new messages
	DefaultClaimIdle    = 30 * time.Second       // a pending message idle this long is taken over
	DefaultLease        = 30 * time.Second       // how long a consumer's claim on one event lasts
	DefaultWindow       = 24 * time.Hour         // how long the Redis done record answers repeats
	DefaultStatsEvery   = 15 * time.Second       // how often the gauges are refreshed
	defaultRedisTimeout = 2 * time.Second
)

// settings are the options of a Relay or a Consumer; each uses the ones
// that concern it.
type settings struct {
	stream     string
	maxLen     int64
	batch      int
	interval   time.Duration
	block      time.Duration
	claimIdle  time.Duration
	lease      time.Duration
	window     time.Duration
	statsEvery time.Duration
	metrics    *Metrics
	log        *slog.Logger
	failpoints *failpoint.Set
}

func defaults() settings {
	return settings{stream: DefaultStream, maxLen: DefaultMaxLen, batch: DefaultBatch, interval: DefaultInterval,
		block: DefaultBlock, claimIdle: DefaultClaimIdle, lease: DefaultLease, window: DefaultWindow,
		statsEvery: DefaultStatsEvery, log: slog.New(slog.DiscardHandler)}
}

// Option configures a Relay or a Consumer. A nil option is an error
// wrapping [ErrConfig].
type Option func(*settings) error

func apply(opts []Option) (settings, error) {
	s := defaults()
	err := option.Apply(&s, opts, ErrConfig)
	return s, err
}

func positive(name string, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("%w: %s must be positive, got %v", ErrConfig, name, d)
	}
	return nil
}

// WithStream sets the stream's key (default DefaultStream).
func WithStream(key string) Option {
	return func(s *settings) error {
		if key == "" {
			return fmt.Errorf("%w: empty stream key", ErrConfig)
		}
		s.stream = key
		return nil
	}
}

// WithMaxLen bounds the stream to about n entries (XADD MAXLEN ~ n; default
// DefaultMaxLen). Entries trimmed before a consumer group read them are
// lost to it: keep n well above what the consumers can fall behind by.
func WithMaxLen(n int64) Option {
	return func(s *settings) error {
		if n < 1 {
			return fmt.Errorf("%w: max length %d", ErrConfig, n)
		}
		s.maxLen = n
		return nil
	}
}

// WithBatch sets how many outbox rows a relay transaction takes, and how
// many messages a consumer reads at once (default DefaultBatch).
func WithBatch(n int) Option {
	return func(s *settings) error {
		if n < 1 || n > 10_000 {
			return fmt.Errorf("%w: batch %d: want 1 to 10000", ErrConfig, n)
		}
		s.batch = n
		return nil
	}
}

// WithInterval sets how long the relay waits when the outbox is empty
// (default DefaultInterval).
func WithInterval(d time.Duration) Option {
	return func(s *settings) error { s.interval = d; return positive("relay interval", d) }
}

// WithBlock sets how long a consumer's read waits for new messages
// (default DefaultBlock). It also bounds how long Run takes to notice that
// its context ended.
func WithBlock(d time.Duration) Option {
	return func(s *settings) error { s.block = d; return positive("read block", d) }
}

// WithClaimIdle sets how long a message may stay pending with its consumer
// before another takes it over with XAUTOCLAIM (default DefaultClaimIdle).
// Keep it above the longest processing time, or slow consumers lose their
// messages to others (which the claim then turns away).
func WithClaimIdle(d time.Duration) Option {
	return func(s *settings) error { s.claimIdle = d; return positive("claim idle", d) }
}

// WithLease sets how long an exact consumer's claim on one event keeps the
// other consumers off it (default DefaultLease). A consumer that dies
// holding it delays the event by at most this long.
func WithLease(d time.Duration) Option {
	return func(s *settings) error { s.lease = d; return positive("claim lease", d) }
}

// WithWindow sets how long the Redis done record of an event answers its
// repeats (default DefaultWindow). After it, the Postgres row still does,
// at the price of a transaction.
func WithWindow(d time.Duration) Option {
	return func(s *settings) error { s.window = d; return positive("dedup window", d) }
}

// WithStatsEvery sets how often Run refreshes the gauges: the outbox lag,
// the pending count and the dedup set size (default DefaultStatsEvery).
func WithStatsEvery(d time.Duration) Option {
	return func(s *settings) error { s.statsEvery = d; return positive("stats period", d) }
}

// WithMetrics records the relay's or the consumer's metrics in m.
func WithMetrics(m *Metrics) Option {
	return func(s *settings) error { s.metrics = m; return nil }
}

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option {
	return func(s *settings) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrConfig)
		}
		s.log = l
		return nil
	}
}

// WithFailpoints arms the crash points after-publish and after-consume
// (see internal/failpoint; only a build with the failpoints tag arms any).
func WithFailpoints(fp *failpoint.Set) Option {
	return func(s *settings) error { s.failpoints = fp; return nil }
}
