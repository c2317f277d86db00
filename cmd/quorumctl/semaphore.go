package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/quorumlock/quorumlock/internal/cli"
	"github.com/quorumlock/quorumlock/quorum"
)

// countOnNode is the permit count one master records for a semaphore.
type countOnNode struct {
	Addr      string `json:"addr"`
	Reachable bool   `json:"reachable"`
	Present   bool   `json:"present"`
	Count     int    `json:"count"` // 0 when absent or not a count
	Error     string `json:"error,omitempty"`
}

// permitView is one permit of a semaphore over the masters.
type permitView struct {
	Index int `json:"index"`
	keyView
}

// semaphoreView is a semaphore over the masters: the permit count each
// records, and each permit's holder.
type semaphoreView struct {
	Name     string        `json:"name"`
	CountKey string        `json:"count_key"`
	Counts   []countOnNode `json:"counts"`
	// Agree is true when every master that records a count records the
	// same valid one.
	Agree bool `json:"counts_agree"`
	// Count is the largest count recorded: the permits shown.
	Count   int          `json:"count"`
	Held    int          `json:"held"` // permits a majority holds with one token
	Permits []permitView `json:"permits"`
}

// semaphoreReport is the output of semaphore.
type semaphoreReport struct {
	Majority int           `json:"majority"`
	Masters  []masterState `json:"masters"`
	semaphoreView
}

func (a *app) semaphoreCmd() *cobra.Command {
	var v flagVars
	var token string
	var index int
	const groups = withRedis
	cmd := &cobra.Command{
		Use:   "semaphore NAME [--release I --token TOKEN]",
		Short: "Show a semaphore's permit count and each permit's holder, or release one permit",
		Long: `semaphore reads the semaphore NAME on every master, in parallel: the permit
count each records (` + quorum.PermitCountKey("NAME") + `), and for each permit
(` + quorum.PermitKey("NAME", 0) + `, ...) the token a majority holds, on how many masters,
and its shortest PTTL. Tokens are shown as digests only.

--release I --token TOKEN runs compare-and-delete of permit I on every
master, as unlock does: it is deleted only where it holds TOKEN. --token -
reads the token from the first line of standard input.

Exit status 1 when fewer than a majority of the masters answered, the
masters record different counts, or (--release) nothing was released or a
master did not answer; 2 on bad usage, a permit index out of range included.`,
		Args: nameArg,
		RunE: a.phase.RunE(func(cmd *cobra.Command, args []string) error {
			s, err := a.settings(cmd, &v, groups)
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("release") {
				if cmd.Flags().Changed("token") {
					return cli.UsageError("--token is for --release")
				}
				return a.semaphore(cmd.Context(), s, args[0])
			}
			if token, err = a.tokenValue(token, "give the token of the permit's holder"); err != nil {
				return err
			}
			return a.releasePermit(cmd.Context(), s, args[0], index, token)
		}),
	}
	v.addFlags(cmd, groups)
	cmd.Flags().IntVar(&index, "release", 0, "release permit `I` (0-based) where it holds --token")
	cmd.Flags().StringVar(&token, "token", "", "the permit holder's token; - reads it from standard input")
	return cmd
}

// nameArg checks that a command got exactly one non-empty NAME, other
// than the restart marker's key.
func nameArg(cmd *cobra.Command, args []string) error {
	switch {
	case len(args) == 0:
		return cli.UsageError("missing NAME: usage: %s", cmd.UseLine())
	case len(args) > 1:
		return cli.UsageError("want one NAME, got %d arguments: usage: %s", len(args), cmd.UseLine())
	case args[0] == "":
		return cli.UsageError("NAME is empty")
	case args[0] == quorum.BootMarkerKey:
		return cli.UsageError("name %q is the restart marker's key, not a lock's", args[0])
	}
	return nil
}

// semaphore reports the semaphore name.
func (a *app) semaphore(ctx context.Context, s settings, name string) error {
	cs := s.clients()
	defer closeAll(cs)
	sv, _, ms := readSemaphore(ctx, s, cs, name, nil)
	rep := semaphoreReport{Majority: majority(len(cs)), Masters: ms, semaphoreView: sv}
	if s.json {
		if err := a.writeJSON(rep); err != nil {
			return err
		}
	} else {
		a.printSemaphore(rep)
	}
	if err := quorumRead(fmt.Sprintf("the permits of %q", name), ms); err != nil {
		return err
	}
	return sv.countError()
}

// countError reports masters that record different counts, or a value
// that is no count: acquisitions of the semaphore then fail.
func (sv semaphoreView) countError() error {
	if sv.Agree {
		return nil
	}
	return fmt.Errorf("the masters record different or invalid permit counts in %q: an acquisition fails where its count differs", sv.CountKey)
}

// readSemaphore reads the semaphore name on every master of cs: first its
// count key and the extra keys, then the permits of the largest count on
// the masters that answered. It returns the semaphore, the extra keys'
// views, and whether each master answered every read.
func readSemaphore(ctx context.Context, s settings, cs []*redis.Client, name string, extra []string) (semaphoreView, []keyView, []masterState) {
	sv := semaphoreView{Name: name, CountKey: quorum.PermitCountKey(name)}
	first := readViews(ctx, s, cs, append([]string{sv.CountKey}, extra...), nil)
	sv.countsFrom(first[0])
	keys := make([]string, sv.Count)
	for i := range keys {
		keys[i] = quorum.PermitKey(name, i)
	}
	permits := readViews(ctx, s, cs, keys, downErrors(masterStates(first)))
	sv.Permits = make([]permitView, len(permits))
	for i, v := range permits {
		sv.Permits[i] = permitView{Index: i, keyView: v}
		if v.Held {
			sv.Held++
		}
	}
	return sv, first[1:], masterStates(first, permits)
}

// countsFrom sets the counts of sv from the reads of its count key.
func (sv *semaphoreView) countsFrom(v keyView) {
	sv.Counts = make([]countOnNode, len(v.Nodes))
	sv.Agree = true
	for i, n := range v.Nodes {
		c := countOnNode{Addr: n.Addr, Reachable: n.Reachable, Present: n.Present, Error: n.Error}
		if n.Present && n.Error == "" {
			k, err := strconv.Atoi(n.value)
			if err != nil || k < 1 || k > quorum.MaxPermits {
				c.Error = fmt.Sprintf("not a permit count (1 to %d): %q", quorum.MaxPermits, n.value)
			} else {
				c.Count = k
			}
		}
		switch {
		case c.Error != "" && c.Reachable:
			sv.Agree = false
		case c.Count > 0 && sv.Count > 0 && c.Count != sv.Count:
			sv.Agree = false
		}
		sv.Count = max(sv.Count, c.Count)
		sv.Counts[i] = c
	}
}

// printSemaphore prints rep as tables: the counts, then the permits.
func (a *app) printSemaphore(rep semaphoreReport) {
	fmt.Fprintf(a.stdout, "semaphore %q\n", rep.Name)
	a.printCounts(rep.semaphoreView)
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PERMIT\tKEY\tHOLDER\tMASTERS\tMIN PTTL")
	for _, p := range rep.Permits {
		who, where, pttl := p.cells(len(rep.Masters))
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", p.Index, p.Key, who, where, pttl)
	}
	_ = tw.Flush()
	fmt.Fprintf(a.stdout, "held: %d of %d permits (a holder needs %d of %d masters)\n", rep.Held, rep.Count, rep.Majority, len(rep.Masters))
	printUnreachable(a.stdout, rep.Masters)
}

// printCounts prints the count each master records, and the verdict.
func (a *app) printCounts(sv semaphoreView) {
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "NODE\tPERMITS (%s)\n", sv.CountKey)
	for _, c := range sv.Counts {
		switch {
		case !c.Reachable:
			fmt.Fprintf(tw, "%s\tunreachable\n", c.Addr)
		case c.Error != "":
			fmt.Fprintf(tw, "%s\terror: %s\n", c.Addr, c.Error)
		case !c.Present:
			fmt.Fprintf(tw, "%s\tabsent\n", c.Addr)
		default:
			fmt.Fprintf(tw, "%s\t%d\n", c.Addr, c.Count)
		}
	}
	_ = tw.Flush()
	switch {
	case sv.Count == 0 && sv.Agree:
		fmt.Fprintln(a.stdout, "permit count: none recorded (never acquired, or the count key was deleted)")
	case sv.Agree:
		fmt.Fprintf(a.stdout, "permit count: %d, the same on every master that records one\n", sv.Count)
	case sv.Count == 0:
		fmt.Fprintln(a.stdout, "permit count: none valid (see the errors above)")
	default:
		fmt.Fprintf(a.stdout, "permit count: the masters DISAGREE; permits 0 to %d shown\n", sv.Count-1)
	}
}

// releasePermit releases permit i of the semaphore name where it holds
// token, after checking that i is one of its permits.
func (a *app) releasePermit(ctx context.Context, s settings, name string, i int, token string) error {
	cs := s.clients()
	defer closeAll(cs)
	if err := checkPermit(ctx, s, cs, name, i); err != nil {
		return err
	}
	return a.unlockKey(ctx, s, cs, quorum.PermitKey(name, i), nil, token)
}

// checkPermit makes sure that i is a permit of the semaphore name: below
// the largest count a master records.
func checkPermit(ctx context.Context, s settings, cs []*redis.Client, name string, i int) error {
	if i < 0 {
		return cli.UsageError("permit %d: an index is 0 or more", i)
	}
	var sv semaphoreView
	v := readViews(ctx, s, cs, []string{quorum.PermitCountKey(name)}, nil)
	sv.countsFrom(v[0])
	switch {
	case reachableCount(masterStates(v)) == 0:
		return errors.New("nothing released: no master answered")
	case sv.Count == 0:
		return cli.UsageError("no master records a permit count for %q (%s): not a semaphore in use; 'quorumctl unlock KEY' releases a single key", name, quorum.PermitCountKey(name))
	case i >= sv.Count:
		return cli.UsageError("permit %d: %q has %d permits (0 to %d)", i, name, sv.Count, sv.Count-1)
	}
	return nil
}
