package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/quorumlock/quorumlock/internal/cli"
	"github.com/quorumlock/quorumlock/quorum"
)

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

// unlock releases key on every master where it holds token, and reports
// each master's answer.
func (a *app) unlock(ctx context.Context, s settings, key, token string) error {
	cs := s.clients()
	defer closeAll(cs)
	rep := unlockReport{Key: key, TokenDigest: digest(token), Nodes: make([]unlockOnNode, len(cs))}
	script := redis.NewScript(unlockScript)
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, s.timeout)
			defer cancel()
			rep.Nodes[i] = unlockOn(rctx, script, c, key, token)
		})
	}
	wg.Wait()
	failed := rep.tally()
	if s.json {
		if err := a.writeJSON(rep); err != nil {
			return err
		}
	} else {
		a.printUnlock(rep)
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

// unlockOn runs compare-and-delete of key for token on the master c.
func unlockOn(ctx context.Context, script *redis.Script, c *redis.Client, key, token string) unlockOnNode {
	n := unlockOnNode{Addr: c.Options().Addr}
	v, err := script.Run(ctx, c, []string{key}, token).Int64()
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
	return n
}

// tally counts the masters that released the key into rep.Released, and
// returns how many failed to answer.
func (rep *unlockReport) tally() (failed int) {
	for _, n := range rep.Nodes {
		switch n.Result {
		case unlockReleased:
			rep.Released++
		case unlockUnreachable, unlockError:
			failed++
		}
	}
	return failed
}

// printUnlock prints rep as a table, a master a row.
func (a *app) printUnlock(rep unlockReport) {
	fmt.Fprintf(a.stdout, "key %q, token %s\n", rep.Key, rep.TokenDigest)
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

// isNetError reports whether err means the master could not be reached (a
// dial, read or write failure or a timeout), as opposed to an answer.
func isNetError(err error) bool {
	var re redis.Error
	return !errors.As(err, &re)
}
