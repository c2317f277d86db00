package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/quorumlock/quorumlock/fencing"
	"github.com/quorumlock/quorumlock/internal/cli"
	"github.com/quorumlock/quorumlock/internal/wait"
	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/quorum"
)

// lockReport is the output of lock.
type lockReport struct {
	Key         string  `json:"key"`
	TokenDigest string  `json:"token_digest"`
	Fence       int64   `json:"fence,omitempty"` // 0: no database configured
	ValidityMS  float64 `json:"validity_ms"`
	Until       string  `json:"until"` // RFC 3339, on this machine's clock
	HoldMS      int64   `json:"hold_ms"`
	Kept        bool    `json:"kept"`                 // --hold 0: the lock stays until its TTL
	Released    *int    `json:"released,omitempty"`   // masters that released it after the hold
	Token       string  `json:"token,omitempty"`      // --hold 0 only: the one place a token is shown
	LostError   string  `json:"lost_error,omitempty"` // the lease was lost during the hold
}

// timeFormat is how lock shows the end of a lease: RFC 3339 with
// milliseconds.
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

// releaseCounter is an Observer that remembers the last release's count.
type releaseCounter struct {
	lease.NopObserver
	mu       sync.Mutex
	released int
	seen     bool
}

// ObserveRelease records how many masters released the key.
func (r *releaseCounter) ObserveRelease(e lease.ReleaseEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.released, r.seen = e.Released, true
}

func (r *releaseCounter) count() (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.released, r.seen
}

func (a *app) lockCmd() *cobra.Command {
	var v flagVars
	var ttl, hold, wait time.Duration
	const groups = withRedis | withGuard | withDB | withNodeTimeout
	cmd := &cobra.Command{
		Use:   "lock KEY [--ttl D] [--hold D] [--wait D]",
		Short: "Take KEY through quorum.Locker, hold it, release it",
		Long: `lock takes KEY through quorum.Locker with the lease TTL --ttl, with a fence
from fence_counters when a database is configured, and prints the token's
digest, the fence and the validity. It then holds the lock for --hold (the
lock's watchdog extends it meanwhile) and releases it.

With --hold 0 it keeps the lock, which then expires by its TTL, and prints
the full token once, on the last line of its output ("token: ..."), so that
'quorumctl unlock KEY --token TOKEN' can release it sooner. This is the only
place quorumctl ever shows a token: keep it secret, it grants unlock.

The restart window is the longer of --ttl and ordersd's lock TTL
(ORDERS_LOCK_TTL). --wait 0 makes one attempt; a longer --wait retries while
the key is held, up to that long.`,
		Args: keyArg,
		RunE: a.phase.RunE(func(cmd *cobra.Command, args []string) error {
			s, err := a.settings(cmd, &v, groups)
			if err != nil {
				return err
			}
			switch {
			case ttl <= 0:
				return cli.UsageError("--ttl must be positive, got %v", ttl)
			case hold < 0:
				return cli.UsageError("--hold must not be negative, got %v", hold)
			case wait < 0:
				return cli.UsageError("--wait must not be negative, got %v", wait)
			}
			return a.lock(cmd.Context(), s, args[0], ttl, hold, wait)
		}),
	}
	v.addFlags(cmd, groups)
	cmd.Flags().DurationVar(&ttl, "ttl", defaultLockTTL, "lease TTL")
	cmd.Flags().DurationVar(&hold, "hold", 0, "how long to hold the lock before releasing it; 0: keep it and print its token once")
	cmd.Flags().DurationVar(&wait, "wait", 0, "how long to retry while the key is held; 0: one attempt")
	return cmd
}

// lock takes key, then keeps it (hold 0) or holds it for hold and
// releases it, and reports the lease.
func (a *app) lock(ctx context.Context, s settings, key string, ttl, hold, maxWait time.Duration) error {
	if key == quorum.BootMarkerKey {
		return cli.UsageError("key %q is the restart marker, not a lock", key)
	}
	rc := &releaseCounter{}
	opts := lockOptions(s, ttl, maxWait, rc)
	if s.databaseURL != "" {
		conn, err := s.connectDB(ctx)
		if err != nil {
			return err
		}
		defer conn.Close(context.WithoutCancel(ctx))
		issuer, err := fencing.NewIssuer(conn)
		if err != nil {
			return fmt.Errorf("fence: %w", err)
		}
		opts = append(opts, quorum.WithFencer(issuer))
	}
	cs := s.clients()
	defer closeAll(cs)
	nodes := make([]redis.UniversalClient, len(cs))
	for i, c := range cs {
		nodes[i] = c
	}
	l, err := quorum.New(nodes, opts...)
	if err != nil {
		return cli.UsageError("%w", err)
	}
	defer func() { _ = l.Close() }()
	rep := lockReport{Key: key, HoldMS: hold.Milliseconds()}
	if hold == 0 {
		return a.keepLock(ctx, l, s, &rep, ttl)
	}
	return a.holdLock(ctx, l, rc, s, &rep, hold, len(cs))
}

// lockOptions are the Locker's options for lock, but its fencer: the
// lease TTL, a restart window of at least ttl, one attempt when maxWait is
// 0 (else retries for up to maxWait), and the settings' node timeout and
// durability.
func lockOptions(s settings, ttl, maxWait time.Duration, obs lease.Observer) []quorum.Option {
	opts := []quorum.Option{quorum.WithTTL(ttl), quorum.WithAmnesiaWindow(max(ttl, s.window)), quorum.WithObserver(obs)}
	if maxWait == 0 {
		opts = append(opts, quorum.WithRetry(quorum.Retry{Attempts: 1, BaseDelay: quorum.DefaultBaseDelay, MaxDelay: quorum.DefaultMaxDelay}), quorum.WithMaxWait(0))
	} else {
		opts = append(opts, quorum.WithMaxWait(maxWait))
	}
	if s.nodeTimeout > 0 {
		opts = append(opts, quorum.WithNodeTimeout(s.nodeTimeout))
	}
	if s.durable {
		opts = append(opts, quorum.WithDurableNodes(true))
	}
	return opts
}

// describe fills in the report's view of lease: its token's digest, its
// fence and its validity.
func (rep *lockReport) describe(le lease.Lease) {
	until := le.Until()
	rep.TokenDigest, rep.Fence = digest(le.Token()), le.Fence()
	rep.ValidityMS, rep.Until = ms(time.Until(until)), until.Format(timeFormat)
}

// keepLock takes rep.Key and keeps it until its TTL runs out, and prints
// its token, the one place quorumctl shows one.
func (a *app) keepLock(ctx context.Context, l *quorum.Locker, s settings, rep *lockReport, ttl time.Duration) error {
	le, err := l.Lock(ctx, rep.Key)
	if err != nil {
		return fmt.Errorf("not locked: %w", err)
	}
	rep.describe(le)
	rep.Kept, rep.Token = true, le.Token()
	if s.json {
		return a.writeJSON(rep)
	}
	a.printLock(*rep, s.databaseURL != "")
	fmt.Fprintf(a.stdout, "kept:     until its TTL (%v) runs out; release it sooner with: quorumctl unlock %s --token <the token below>\n", ttl, rep.Key)
	fmt.Fprintf(a.stdout, "token:    %s\n", rep.Token)
	return nil
}

// holdLock takes rep.Key, holds it for hold while the lock's watchdog
// extends it, releases it, and reports on how many of the masters the
// release landed.
func (a *app) holdLock(ctx context.Context, l *quorum.Locker, rc *releaseCounter, s settings, rep *lockReport, hold time.Duration, masters int) error {
	err := l.Do(ctx, rep.Key, func(fctx context.Context, le lease.Lease) error {
		rep.describe(le)
		if !s.json {
			a.printLock(*rep, s.databaseURL != "")
			fmt.Fprintf(a.stdout, "holding:  %v\n", hold)
		}
		if err := wait.Sleep(fctx, hold); err != nil {
			if cause := context.Cause(fctx); errors.Is(cause, lease.ErrLeaseLost) {
				return cause
			}
			return fmt.Errorf("interrupted after holding it for less than %v: %w", hold, err)
		}
		return nil
	})
	if rep.TokenDigest == "" { // not acquired
		return fmt.Errorf("not locked: %w", err)
	}
	_ = l.Close() // waits for the release's last answer
	if n, ok := rc.count(); ok {
		rep.Released = &n
	}
	if err != nil {
		rep.LostError = err.Error()
	}
	if s.json {
		if werr := a.writeJSON(rep); werr != nil {
			return werr
		}
	} else if rep.Released != nil {
		fmt.Fprintf(a.stdout, "released: on %d of %d masters\n", *rep.Released, masters)
	}
	if err != nil {
		return fmt.Errorf("held, then: %w", err)
	}
	return nil
}

func (a *app) printLock(rep lockReport, fenced bool) {
	fence := "none (no database configured)"
	if fenced {
		fence = fmt.Sprint(rep.Fence)
	}
	fmt.Fprintf(a.stdout, "key:      %s\n", rep.Key)
	fmt.Fprintf(a.stdout, "digest:   %s\n", rep.TokenDigest)
	fmt.Fprintf(a.stdout, "fence:    %s\n", fence)
	fmt.Fprintf(a.stdout, "validity: %v (until %s)\n", (time.Duration(rep.ValidityMS*1000) * time.Microsecond).Round(time.Millisecond), rep.Until)
}
