package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/quorumlock/quorumlock/internal/cli"
	"github.com/quorumlock/quorumlock/quorum"
)

// Suffixes of a read-write lock's keys (quorum.RWLock): its read permits
// are the semaphore name+readSuffix, a waiting writer holds
// name+waitingSuffix.
const (
	readSuffix    = ":read"
	waitingSuffix = ":writer-waiting"
)

// rwlockReport is the output of rwlock.
type rwlockReport struct {
	Name          string        `json:"name"`
	Majority      int           `json:"majority"`
	Masters       []masterState `json:"masters"`
	Writer        keyView       `json:"writer"`
	WaitingWriter keyView       `json:"waiting_writer"`
	// WriterPermits counts the read permits a majority holds with the
	// writer's token; ReadersHeld those it holds with another: readers.
	WriterPermits int           `json:"writer_permits"`
	ReadersHeld   int           `json:"readers_held"`
	MaxReaders    int           `json:"max_readers"`
	Readers       semaphoreView `json:"readers"`
}

// writerOnNode is one master's answer to --release-writer: the result of
// the key NAME, and how many read permits it released.
type writerOnNode struct {
	Addr            string `json:"addr"`
	Result          string `json:"result"`
	PermitsReleased int    `json:"permits_released"`
	Error           string `json:"error,omitempty"`
}

// writerReleaseReport is the output of rwlock --release-writer.
type writerReleaseReport struct {
	Name        string         `json:"name"`
	TokenDigest string         `json:"token_digest"`
	Keys        int            `json:"keys"` // NAME and the read permits
	Nodes       []writerOnNode `json:"nodes"`
	Released    int            `json:"released"` // masters that released a key
}

// rwlockFlags are the release flags of rwlock.
type rwlockFlags struct {
	releaseWriter bool
	reader        int
	token         string
}

func (a *app) rwlockCmd() *cobra.Command {
	var v flagVars
	var f rwlockFlags
	const groups = withRedis
	cmd := &cobra.Command{
		Use:   "rwlock NAME [--release-writer | --release-reader I] [--token TOKEN]",
		Short: "Show a read-write lock's writer, waiting writer and readers, or release the writer or a reader",
		Long: `rwlock reads the read-write lock NAME on every master, in parallel: the
writer (the key NAME), a waiting writer (NAME` + waitingSuffix + `), and the read
permits (the semaphore NAME` + readSuffix + `), each with the token digest a majority
holds. The writer holds every read permit under its own token; the other
held permits are readers.

--release-writer --token TOKEN runs compare-and-delete, on every master, of
NAME and of every read permit, in one call per master: only the keys that
hold TOKEN are deleted. --release-reader I --token TOKEN releases read
permit I as 'semaphore NAME` + readSuffix + ` --release I' does. --token - reads
the token from standard input. A waiting writer's key has a token of its
own: 'quorumctl unlock NAME` + waitingSuffix + ` --token T' releases it.

Exit status 1 when fewer than a majority of the masters answered, the read
permit counts differ, or a release released nothing or missed a master; 2
on bad usage.`,
		Args: nameArg,
		RunE: a.phase.RunE(func(cmd *cobra.Command, args []string) error {
			s, err := a.settings(cmd, &v, groups)
			if err != nil {
				return err
			}
			return a.runRWLock(cmd, s, args[0], f)
		}),
	}
	v.addFlags(cmd, groups)
	cmd.Flags().BoolVar(&f.releaseWriter, "release-writer", false, "release the writer's keys that hold --token")
	cmd.Flags().IntVar(&f.reader, "release-reader", 0, "release read permit `I` (0-based) where it holds --token")
	cmd.Flags().StringVar(&f.token, "token", "", "the holder's token; - reads it from standard input")
	return cmd
}

// runRWLock checks the release flags of rwlock and runs what they ask.
func (a *app) runRWLock(cmd *cobra.Command, s settings, name string, f rwlockFlags) error {
	reader := cmd.Flags().Changed("release-reader")
	switch {
	case f.releaseWriter && reader:
		return cli.UsageError("--release-writer and --release-reader exclude each other")
	case !f.releaseWriter && !reader:
		if cmd.Flags().Changed("token") {
			return cli.UsageError("--token is for --release-writer or --release-reader")
		}
		return a.rwlock(cmd.Context(), s, name)
	}
	token, err := a.tokenValue(f.token, "give the holder's token")
	if err != nil {
		return err
	}
	if reader {
		return a.releasePermit(cmd.Context(), s, name+readSuffix, f.reader, token)
	}
	return a.releaseWriter(cmd.Context(), s, name, token)
}

// rwlock reports the read-write lock name.
func (a *app) rwlock(ctx context.Context, s settings, name string) error {
	cs := s.clients()
	defer closeAll(cs)
	sv, extra, ms := readSemaphore(ctx, s, cs, name+readSuffix, []string{name, name + waitingSuffix})
	rep := rwlockReport{Name: name, Majority: majority(len(cs)), Masters: ms,
		Writer: extra[0], WaitingWriter: extra[1], MaxReaders: sv.Count, Readers: sv}
	for _, p := range sv.Permits {
		switch {
		case !p.Held:
		case rep.Writer.Held && p.Holder.value == rep.Writer.Holder.value:
			rep.WriterPermits++
		default:
			rep.ReadersHeld++
		}
	}
	if s.json {
		if err := a.writeJSON(rep); err != nil {
			return err
		}
	} else {
		a.printRWLock(rep)
	}
	if err := quorumRead(fmt.Sprintf("%q", name), ms); err != nil {
		return err
	}
	return sv.countError()
}

// printRWLock prints rep: a master a row, then the verdicts and readers.
func (a *app) printRWLock(rep rwlockReport) {
	fmt.Fprintf(a.stdout, "read-write lock %q\n", rep.Name)
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tWRITER\tPTTL\tWAITING WRITER\tREAD PERMITS")
	for i, m := range rep.Masters {
		w, ww, c := rep.Writer.Nodes[i], rep.WaitingWriter.Nodes[i], rep.Readers.Counts[i]
		count := "absent"
		switch {
		case !c.Reachable:
			count = "unreachable"
		case c.Error != "":
			count = "error: " + c.Error
		case c.Present:
			count = fmt.Sprint(c.Count)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.Addr, nodeCell(w), pttlString(w.PTTLMS), nodeCell(ww), count)
	}
	_ = tw.Flush()
	n := len(rep.Masters)
	fmt.Fprintf(a.stdout, "writer: %s", heldLine(rep.Writer, n, rep.Majority))
	if rep.Writer.Held {
		fmt.Fprintf(a.stdout, "; it holds %d of %d read permits", rep.WriterPermits, rep.MaxReaders)
	}
	fmt.Fprintf(a.stdout, "\nwaiting writer: %s\n", heldLine(rep.WaitingWriter, n, rep.Majority))
	fmt.Fprintf(a.stdout, "readers: %d of %d read permits held\n", rep.ReadersHeld, rep.MaxReaders)
	tw = tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PERMIT\tKEY\tHOLDER\tMASTERS\tMIN PTTL")
	for _, p := range rep.Readers.Permits {
		if p.Present == 0 || (p.Held && rep.Writer.Held && p.Holder.value == rep.Writer.Holder.value) {
			continue // free, or the writer's
		}
		who, where, pttl := p.cells(n)
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", p.Index, p.Key, who, where, pttl)
	}
	_ = tw.Flush()
	if !rep.Readers.Agree {
		fmt.Fprintf(a.stdout, "read permit count: the masters DISAGREE (%s)\n", rep.Readers.CountKey)
	}
	printUnreachable(a.stdout, rep.Masters)
}

// heldLine says in words who holds v over masters masters.
func heldLine(v keyView, masters, need int) string {
	switch {
	case v.Held:
		return fmt.Sprintf("token %s on %d of %d masters (%d needed), for at most %s more",
			v.Holder.TokenDigest, v.Holder.Nodes, masters, need, pttlString(v.Holder.MinPTTLMS))
	case v.Present == 0:
		return "none"
	}
	return fmt.Sprintf("none: values on %d of %d masters, no token on a majority (%d needed)", v.Present, masters, need)
}

// releaseWriter releases, where they hold token, the key name and every
// read permit of the read-write lock name, in one call per master.
func (a *app) releaseWriter(ctx context.Context, s settings, name, token string) error {
	cs := s.clients()
	defer closeAll(cs)
	var sv semaphoreView
	sv.countsFrom(readViews(ctx, s, cs, []string{quorum.PermitCountKey(name + readSuffix)}, nil)[0])
	keys := []string{name}
	for i := range sv.Count {
		keys = append(keys, quorum.PermitKey(name+readSuffix, i))
	}
	rep := writerReleaseReport{Name: name, TokenDigest: digest(token), Keys: len(keys), Nodes: make([]writerOnNode, len(cs))}
	failed := 0
	for i, r := range releaseAll(ctx, s, cs, keys, nil, token) {
		on := r.on(0)
		n := writerOnNode{Addr: on.Addr, Result: on.Result, Error: on.Error}
		for _, res := range r.results[min(1, len(r.results)):] {
			if res == unlockReleased {
				n.PermitsReleased++
			}
		}
		switch {
		case r.failure != "":
			failed++
		case n.Result == unlockReleased || n.PermitsReleased > 0:
			rep.Released++
		}
		rep.Nodes[i] = n
	}
	if s.json {
		if err := a.writeJSON(rep); err != nil {
			return err
		}
	} else {
		a.printWriterRelease(rep)
	}
	return releaseVerdict(rep.Released, failed)
}

// printWriterRelease prints rep as a table, a master a row.
func (a *app) printWriterRelease(rep writerReleaseReport) {
	fmt.Fprintf(a.stdout, "read-write lock %q, writer token %s (%d keys: %s and %d read permits)\n", rep.Name, rep.TokenDigest, rep.Keys, rep.Name, rep.Keys-1)
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tWRITER KEY\tREAD PERMITS RELEASED")
	for _, n := range rep.Nodes {
		switch n.Result {
		case unlockReleased, unlockNotOwner, unlockAbsent:
			fmt.Fprintf(tw, "%s\t%s\t%d\n", n.Addr, resultText(n.Result), n.PermitsReleased)
		default:
			fmt.Fprintf(tw, "%s\t%s: %s\t-\n", n.Addr, n.Result, n.Error)
		}
	}
	_ = tw.Flush()
	fmt.Fprintf(a.stdout, "released on %d of %d masters\n", rep.Released, len(rep.Nodes))
}
