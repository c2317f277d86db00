package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/quorumlock/quorumlock/fencing"
	"github.com/quorumlock/quorumlock/internal/cli"
	"github.com/quorumlock/quorumlock/internal/wait"
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
	quorum.NopObserver
	mu       sync.Mutex
	released int
	seen     bool
}

// ObserveRelease records how many masters released the key.
func (r *releaseCounter) ObserveRelease(e quorum.ReleaseEvent) {
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

func (a *app) lock(ctx context.Context, s settings, key string, ttl, hold, maxWait time.Duration) error {
	if key == quorum.BootMarkerKey {
		return cli.UsageError("key %q is the restart marker, not a lock", key)
	}
	rc := &releaseCounter{}
	opts := []quorum.Option{quorum.WithTTL(ttl), quorum.WithAmnesiaWindow(max(ttl, s.window)), quorum.WithObserver(rc)}
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
	describe := func(lease *quorum.Lease) {
		until := lease.Until()
		rep.TokenDigest, rep.Fence = digest(lease.Token()), lease.Fence()
		rep.ValidityMS, rep.Until = ms(time.Until(until)), until.Format(timeFormat)
	}
	if hold == 0 {
		lease, err := l.Lock(ctx, key)
		if err != nil {
			return fmt.Errorf("not locked: %w", err)
		}
		describe(lease)
		rep.Kept, rep.Token = true, lease.Token()
		if s.json {
			return a.writeJSON(rep)
		}
		a.printLock(rep, s.databaseURL != "")
		fmt.Fprintf(a.stdout, "kept:     until its TTL (%v) runs out; release it sooner with: quorumctl unlock %s --token <the token below>\n", ttl, key)
		fmt.Fprintf(a.stdout, "token:    %s\n", rep.Token)
		return nil
	}
	err = l.Do(ctx, key, func(fctx context.Context, lease *quorum.Lease) error {
		describe(lease)
		if !s.json {
			a.printLock(rep, s.databaseURL != "")
			fmt.Fprintf(a.stdout, "holding:  %v\n", hold)
		}
		if err := wait.Sleep(fctx, hold); err != nil {
			if cause := context.Cause(fctx); errors.Is(cause, quorum.ErrLeaseLost) {
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
		fmt.Fprintf(a.stdout, "released: on %d of %d masters\n", *rep.Released, len(cs))
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

// unlockScript is compare-and-delete: it deletes KEYS[1] only when it holds
// the token ARGV[1], and then announces the release on the channel the
// Lockers of waiting clients listen to, as the lock's own release does.
// It answers 1 (released), 0 (held by another token) or -1 (absent).
const unlockScript = `
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', 'quorumlock:released:' .. KEYS[1], '1')
  return 1
end
if v then
  return 0
end
return -1
`

// Results of unlock on one master.
const (
	unlockReleased    = "released"
	unlockNotOwner    = "not_owner"
	unlockAbsent      = "absent"
	unlockUnreachable = "unreachable"
	unlockError       = "error"
)

// unlockOnNode is the answer of one master to unlock.
type unlockOnNode struct {
	Addr   string `json:"addr"`
	Result string `json:"result"`
	Error  string `json:"error,omitempty"`
}

// unlockReport is the output of unlock.
type unlockReport struct {
	Key         string         `json:"key"`
	TokenDigest string         `json:"token_digest"`
	Nodes       []unlockOnNode `json:"nodes"`
	Released    int            `json:"released"`
}

func (a *app) unlockCmd() *cobra.Command {
	var v flagVars
	var token string
	const groups = withRedis
	cmd := &cobra.Command{
		Use:   "unlock KEY --token TOKEN",
		Short: "Release KEY on every master where it holds TOKEN",
		Long: `unlock runs compare-and-delete on every master, in parallel: KEY is deleted
only where it holds TOKEN, and left alone where another owner holds it. It
reports each master: released, not owner, absent, or unreachable.

--token - reads the token from the first line of standard input, which
keeps it out of the process list.

Exit status 1 when no master released the key, or a master could not be
reached (the key then expires there by its TTL).`,
		Args: keyArg,
		RunE: a.phase.RunE(func(cmd *cobra.Command, args []string) error {
			s, err := a.settings(cmd, &v, groups)
			if err != nil {
				return err
			}
			if token == "-" {
				line, err := bufio.NewReader(a.stdin).ReadString('\n')
				if err != nil && line == "" {
					return cli.UsageError("--token -: read the token from standard input: %w", err)
				}
				token = line
			}
			token = strings.TrimSpace(token)
			a.addSecret(token)
			if token == "" {
				return cli.UsageError("missing --token: give the token 'lock --hold 0' printed")
			}
			if args[0] == quorum.BootMarkerKey {
				return cli.UsageError("key %q is the restart marker, not a lock", args[0])
			}
			return a.unlock(cmd.Context(), s, args[0], token)
		}),
	}
	v.addFlags(cmd, groups)
	cmd.Flags().StringVar(&token, "token", "", "the lock's token, as 'lock --hold 0' printed it; - reads it from standard input")
	return cmd
}

func (a *app) unlock(ctx context.Context, s settings, key, token string) error {
	cs := s.clients()
	defer closeAll(cs)
	script := redis.NewScript(unlockScript)
	rep := unlockReport{Key: key, TokenDigest: digest(token), Nodes: make([]unlockOnNode, len(cs))}
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() {
			n := unlockOnNode{Addr: c.Options().Addr}
			rctx, cancel := context.WithTimeout(ctx, s.timeout)
			defer cancel()
			v, err := script.Run(rctx, c, []string{key}, token).Int64()
			switch {
			case err != nil && isNetError(err):
				n.Result, n.Error = unlockUnreachable, err.Error()
			case err != nil:
				n.Result, n.Error = unlockError, err.Error()
			case v == 1:
				n.Result = unlockReleased
			case v == 0:
				n.Result = unlockNotOwner
			default:
				n.Result = unlockAbsent
			}
			rep.Nodes[i] = n
		})
	}
	wg.Wait()
	failed := 0
	for _, n := range rep.Nodes {
		switch n.Result {
		case unlockReleased:
			rep.Released++
		case unlockUnreachable, unlockError:
			failed++
		}
	}
	if s.json {
		if err := a.writeJSON(rep); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(a.stdout, "key %q, token %s\n", key, rep.TokenDigest)
		tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tRESULT")
		for _, n := range rep.Nodes {
			switch n.Result {
			case unlockReleased:
				fmt.Fprintf(tw, "%s\treleased\n", n.Addr)
			case unlockNotOwner:
				fmt.Fprintf(tw, "%s\tnot owner: held by another token, left alone\n", n.Addr)
			case unlockAbsent:
				fmt.Fprintf(tw, "%s\tnot owner: absent, nothing to release\n", n.Addr)
			default:
				fmt.Fprintf(tw, "%s\t%s: %s\n", n.Addr, n.Result, n.Error)
			}
		}
		_ = tw.Flush()
		fmt.Fprintf(a.stdout, "released on %d of %d masters\n", rep.Released, len(rep.Nodes))
	}
	switch {
	case rep.Released == 0 && failed == 0:
		return errors.New("nothing released: no master holds this token for the key")
	case rep.Released == 0:
		return fmt.Errorf("nothing released: %d master(s) did not answer", failed)
	case failed > 0:
		return fmt.Errorf("released on %d master(s), but %d did not answer: the key expires there by its TTL", rep.Released, failed)
	}
	return nil
}

// isNetError reports whether err means the master could not be reached (a
// dial, read or write failure or a timeout), as opposed to an answer.
func isNetError(err error) bool {
	var re redis.Error
	return !errors.As(err, &re)
}
