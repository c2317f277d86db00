package main

import (
	"bufio"
	"context"
	_ "embed" // the unlock script
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/quorumlock/quorumlock/internal/cli"
	"github.com/quorumlock/quorumlock/quorum"
)

// unlockLua is compare-and-delete of lock keys on one master, with the
// companions of the first deleted where it is released (unlock.lua).
//
//go:embed unlock.lua
var unlockLua string

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
	Key         string `json:"key"`
	TokenDigest string `json:"token_digest"`
	// Companions are deleted with Key on the masters that released it
	// (an election's leader record).
	Companions []string       `json:"companions,omitempty"`
	Nodes      []unlockOnNode `json:"nodes"`
	Released   int            `json:"released"`
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
			if token, err = a.tokenValue(token, "give the token 'lock --hold 0' printed"); err != nil {
				return err
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

// tokenValue returns the token that --token gave, trimmed: for "-", the
// first line of standard input. It records the token as a secret, and
// tells an operator who gave none to hint.
func (a *app) tokenValue(token, hint string) (string, error) {
	if token == "-" {
		line, err := bufio.NewReader(a.stdin).ReadString('\n')
		if err != nil && line == "" {
			return "", cli.UsageError("--token -: read the token from standard input: %w", err)
		}
		token = line
	}
	token = strings.TrimSpace(token)
	a.addSecret(token)
	if token == "" {
		return "", cli.UsageError("missing --token: %s", hint)
	}
	return token, nil
}

// unlock releases key on every master where it holds token, and reports
// each master's answer.
func (a *app) unlock(ctx context.Context, s settings, key, token string) error {
	cs := s.clients()
	defer closeAll(cs)
	return a.unlockKey(ctx, s, cs, key, nil, token)
}

// unlockKey releases key on every master of cs where it holds token,
// deletes companions there with it, and reports each master's answer.
func (a *app) unlockKey(ctx context.Context, s settings, cs []*redis.Client, key string, companions []string, token string) error {
	rep := unlockReport{Key: key, TokenDigest: digest(token), Companions: companions, Nodes: make([]unlockOnNode, len(cs))}
	for i, r := range releaseAll(ctx, s, cs, []string{key}, companions, token) {
		rep.Nodes[i] = r.on(0)
	}
	failed := rep.tally()
	if s.json {
		if err := a.writeJSON(rep); err != nil {
			return err
		}
	} else {
		a.printUnlock(rep)
	}
	return releaseVerdict(rep.Released, failed)
}

// releaseVerdict is the outcome of a release that released on released
// masters while failed masters gave no answer.
func releaseVerdict(released, failed int) error {
	switch {
	case released == 0 && failed == 0:
		return errors.New("nothing released: no master holds this token for the key")
	case released == 0:
		return fmt.Errorf("nothing released: %d master(s) did not answer", failed)
	case failed > 0:
		return fmt.Errorf("released on %d master(s), but %d did not answer: the key expires there by its TTL", released, failed)
	}
	return nil
}

// nodeRelease is one master's answer to compare-and-delete of keys: a
// result per key, or the failure (unreachable, error) of the whole call.
type nodeRelease struct {
	addr    string
	results []string
	failure string
	err     string
}

// on is the answer of the master for its key i, as unlock reports it.
func (r nodeRelease) on(i int) unlockOnNode {
	if r.failure != "" {
		return unlockOnNode{Addr: r.addr, Result: r.failure, Error: r.err}
	}
	return unlockOnNode{Addr: r.addr, Result: r.results[i]}
}

// releaseAll runs compare-and-delete of keys for token on every master in
// parallel, each call bounded by the timeout, and deletes companions with
// keys[0] on the masters where it is released. On one master it is atomic.
func releaseAll(ctx context.Context, s settings, cs []*redis.Client, keys, companions []string, token string) []nodeRelease {
	script := redis.NewScript(unlockLua)
	out := make([]nodeRelease, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, s.timeout)
			defer cancel()
			out[i] = releaseOn(rctx, script, c, keys, companions, token)
		})
	}
	wg.Wait()
	return out
}

// releaseOn runs the unlock script for keys and companions on the master c.
func releaseOn(ctx context.Context, script *redis.Script, c *redis.Client, keys, companions []string, token string) nodeRelease {
	r := nodeRelease{addr: c.Options().Addr}
	all := append(slices.Clip(keys), companions...)
	vals, err := script.Run(ctx, c, all, token, len(keys)).Int64Slice()
	switch {
	case err != nil && isNetError(err):
		r.failure, r.err = unlockUnreachable, err.Error()
	case err != nil:
		r.failure, r.err = unlockError, err.Error()
	case len(vals) != len(keys):
		r.failure, r.err = unlockError, fmt.Sprintf("the unlock script answered %d results for %d keys", len(vals), len(keys))
	default:
		r.results = make([]string, len(vals))
		for i, v := range vals {
			r.results[i] = releaseResult(v)
		}
	}
	return r
}

// releaseResult names the unlock script's answer for one key.
func releaseResult(v int64) string {
	switch v {
	case 1:
		return unlockReleased
	case 0:
		return unlockNotOwner
	}
	return unlockAbsent
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
		case unlockReleased, unlockNotOwner, unlockAbsent:
			fmt.Fprintf(tw, "%s\t%s\n", n.Addr, resultText(n.Result))
		default:
			fmt.Fprintf(tw, "%s\t%s: %s\n", n.Addr, n.Result, n.Error)
		}
	}
	_ = tw.Flush()
	fmt.Fprintf(a.stdout, "released on %d of %d masters\n", rep.Released, len(rep.Nodes))
	if len(rep.Companions) > 0 {
		fmt.Fprintf(a.stdout, "deleted with it where released: %s\n", strings.Join(rep.Companions, ", "))
	}
}

// resultText says what a master's answer to compare-and-delete means.
func resultText(result string) string {
	switch result {
	case unlockReleased:
		return "released"
	case unlockNotOwner:
		return "not owner: held by another token, left alone"
	case unlockAbsent:
		return "not owner: absent, nothing to release"
	}
	return result
}

// isNetError reports whether err means the master could not be reached (a
// dial, read or write failure or a timeout), as opposed to an answer.
func isNetError(err error) bool {
	var re redis.Error
	return !errors.As(err, &re)
}
