package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"unicode"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/quorumlock/quorumlock/internal/cli"
)

// Suffixes of an election's keys: name+recordSuffix holds the leader's
// "<term>:<value>", name+historySuffix lists the last leaders' records.
// The leadership itself is the lock key name, whose value is the leader's
// token.
const (
	recordSuffix  = ":leader"
	historySuffix = ":leaders"
)

// leaderOnNode is an election's leader record on one master.
type leaderOnNode struct {
	Addr      string `json:"addr"`
	Reachable bool   `json:"reachable"`
	Present   bool   `json:"present"`
	Term      int64  `json:"term,omitempty"`
	Value     string `json:"value,omitempty"`
	// PTTLMS is the record's PTTL in milliseconds (-1 none, -2 absent).
	PTTLMS       int64  `json:"pttl_ms"`
	Error        string `json:"error,omitempty"`
	HistoryError string `json:"history_error,omitempty"`

	history []string
}

// leaderEntry is a leader's record and how many masters hold it.
type leaderEntry struct {
	Term  int64  `json:"term"`
	Value string `json:"value"`
	Nodes int    `json:"nodes"`
}

// electionReport is the output of election.
type electionReport struct {
	Name     string        `json:"name"`
	Majority int           `json:"majority"`
	Masters  []masterState `json:"masters"`
	// Lease is the leadership: the lock key NAME, its token as a digest.
	Lease     keyView        `json:"lease"`
	RecordKey string         `json:"record_key"`
	Records   []leaderOnNode `json:"records"`
	// Agreed is the record of the highest term that a majority of the
	// masters hold alike; MaxTerm the highest term any master records.
	Agreed     *leaderEntry `json:"agreed,omitempty"`
	MaxTerm    int64        `json:"max_term"`
	HistoryKey string       `json:"history_key"`
	// History is the union of the masters' history lists, the highest
	// term first; Malformed counts the entries that are no record.
	History   []leaderEntry `json:"history"`
	Malformed int           `json:"malformed_history_entries"`
}

func (a *app) electionCmd() *cobra.Command {
	var v flagVars
	var token string
	var resign bool
	const groups = withRedis
	cmd := &cobra.Command{
		Use:   "election NAME [--resign --token TOKEN]",
		Short: "Show an election's leader lease, leader record and last leaders, or resign its leader",
		Long: `election reads the election NAME on every master, in parallel: the leader's
lease (the lock key NAME: the digest of the token a majority holds), the
leader record NAME` + recordSuffix + ` ("<term>:<value>") on each master and the
highest term a majority records alike, and the last leaders listed in
NAME` + historySuffix + `. Tokens are shown as digests only; terms and values in full.

--resign --token TOKEN runs compare-and-delete of NAME on every master, as
unlock does, and deletes the leader record with it on the masters where
NAME held TOKEN. --token - reads the token from standard input.

Exit status 1 when fewer than a majority of the masters answered, or
(--resign) nothing was released or a master did not answer; 2 on bad usage.`,
		Args: nameArg,
		RunE: a.phase.RunE(func(cmd *cobra.Command, args []string) error {
			s, err := a.settings(cmd, &v, groups)
			if err != nil {
				return err
			}
			if !resign {
				if cmd.Flags().Changed("token") {
					return cli.UsageError("--token is for --resign")
				}
				return a.election(cmd.Context(), s, args[0])
			}
			if token, err = a.tokenValue(token, "give the leader's token"); err != nil {
				return err
			}
			cs := s.clients()
			defer closeAll(cs)
			return a.unlockKey(cmd.Context(), s, cs, args[0], []string{args[0] + recordSuffix}, token)
		}),
	}
	v.addFlags(cmd, groups)
	cmd.Flags().BoolVar(&resign, "resign", false, "end the leadership that --token holds")
	cmd.Flags().StringVar(&token, "token", "", "the leader's token; - reads it from standard input")
	return cmd
}

// election reports the election name.
func (a *app) election(ctx context.Context, s settings, name string) error {
	cs := s.clients()
	defer closeAll(cs)
	leases := make([]keyOnNode, len(cs))
	rep := electionReport{Name: name, Majority: majority(len(cs)), RecordKey: name + recordSuffix,
		HistoryKey: name + historySuffix, Records: make([]leaderOnNode, len(cs))}
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() { leases[i], rep.Records[i] = readElection(ctx, c, name, s) })
	}
	wg.Wait()
	rep.Lease = newView(name, leases, rep.Majority)
	rep.Masters = masterStates([]keyView{rep.Lease})
	rep.agree()
	rep.merge()
	if s.json {
		if err := a.writeJSON(rep); err != nil {
			return err
		}
	} else {
		a.printElection(rep)
	}
	return quorumRead(fmt.Sprintf("the leadership of %q", name), rep.Masters)
}

// readElection reads, on one master in one pipeline, the lease key name,
// the leader record and the history list.
func readElection(ctx context.Context, c *redis.Client, name string, s settings) (keyOnNode, leaderOnNode) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	pipe := c.Pipeline()
	r := queueKeys(ctx, pipe, []string{name, name + recordSuffix})
	hist := pipe.LRange(ctx, name+historySuffix, 0, -1)
	_, _ = pipe.Exec(ctx) // each command's error is read below
	keys := r.results(c.Options().Addr)
	rec := keys[1]
	out := leaderOnNode{Addr: rec.Addr, Reachable: keys[0].Reachable && rec.Reachable, Present: rec.Present, PTTLMS: rec.PTTLMS, Error: rec.Error}
	if out.Reachable && rec.Present && rec.Error == "" {
		var ok bool
		if out.Term, out.Value, ok = parseRecord(rec.value); !ok {
			out.Error = fmt.Sprintf("not a <term>:<value> record (digest %s)", rec.TokenDigest)
		}
	}
	switch h, err := hist.Result(); {
	case err == nil:
		out.history = h
	case out.Reachable:
		out.HistoryError = err.Error()
	}
	if !out.Reachable && out.Error == "" {
		out.Error = keys[0].Error
	}
	return keys[0], out
}

// parseRecord splits a leader record "<term>:<value>"; the value may hold
// colons of its own.
func parseRecord(rec string) (int64, string, bool) {
	t, v, ok := strings.Cut(rec, ":")
	if !ok {
		return 0, "", false
	}
	term, err := strconv.ParseInt(t, 10, 64)
	if err != nil || term < 0 {
		return 0, "", false
	}
	return term, v, true
}

// agree sets the highest term recorded, and the record of the highest
// term a majority of the masters hold alike.
func (rep *electionReport) agree() {
	count := map[leaderEntry]int{}
	for _, r := range rep.Records {
		if r.Reachable && r.Present && r.Error == "" {
			count[leaderEntry{Term: r.Term, Value: r.Value}]++
			rep.MaxTerm = max(rep.MaxTerm, r.Term)
		}
	}
	for e, n := range count {
		if n >= rep.Majority && (rep.Agreed == nil || e.Term > rep.Agreed.Term) {
			rep.Agreed = &leaderEntry{Term: e.Term, Value: e.Value, Nodes: n}
		}
	}
}

// merge sets the history: each record the masters list, with the number
// of masters that list it, the highest term first.
func (rep *electionReport) merge() {
	count := map[leaderEntry]int{}
	for _, r := range rep.Records {
		seen := map[leaderEntry]bool{}
		for _, h := range r.history {
			term, value, ok := parseRecord(h)
			if !ok {
				rep.Malformed++
				continue
			}
			if e := (leaderEntry{Term: term, Value: value}); !seen[e] {
				seen[e] = true
				count[e]++
			}
		}
	}
	rep.History = make([]leaderEntry, 0, len(count))
	for e, n := range count {
		e.Nodes = n
		rep.History = append(rep.History, e)
	}
	slices.SortFunc(rep.History, func(x, y leaderEntry) int {
		return cmp.Or(cmp.Compare(y.Term, x.Term), cmp.Compare(x.Value, y.Value))
	})
}

// printElection prints rep: a master a row, the verdicts, the history.
func (a *app) printElection(rep electionReport) {
	fmt.Fprintf(a.stdout, "election %q\n", rep.Name)
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tLEASE\tPTTL\tTERM\tVALUE\tRECORD PTTL")
	for i, r := range rep.Records {
		le := rep.Lease.Nodes[i]
		term, value := "-", "-"
		switch {
		case r.Error != "" && r.Reachable:
			value = "error: " + r.Error
		case r.Present && r.Reachable:
			term, value = strconv.FormatInt(r.Term, 10), shown(r.Value)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Addr, nodeCell(le), pttlString(le.PTTLMS), term, value, pttlString(r.PTTLMS))
	}
	_ = tw.Flush()
	n := len(rep.Masters)
	fmt.Fprintf(a.stdout, "leader lease: %s\n", heldLine(rep.Lease, n, rep.Majority))
	if e := rep.Agreed; e != nil {
		fmt.Fprintf(a.stdout, "leader: term %d, value %s, on %d of %d masters (highest term recorded: %d)\n", e.Term, shown(e.Value), e.Nodes, n, rep.MaxTerm)
	} else {
		fmt.Fprintf(a.stdout, "leader: no record on a majority (%d needed; highest term recorded: %d)\n", rep.Majority, rep.MaxTerm)
	}
	fmt.Fprintf(a.stdout, "last leaders (%s):\n", rep.HistoryKey)
	tw = tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TERM\tVALUE\tMASTERS")
	for _, e := range rep.History {
		fmt.Fprintf(tw, "%d\t%s\t%d of %d\n", e.Term, shown(e.Value), e.Nodes, n)
	}
	_ = tw.Flush()
	if rep.Malformed > 0 {
		fmt.Fprintf(a.stdout, "%d history entries are not <term>:<value> records\n", rep.Malformed)
	}
	for _, r := range rep.Records {
		if r.HistoryError != "" {
			fmt.Fprintf(a.stdout, "history unreadable on %s: %s\n", r.Addr, r.HistoryError)
		}
	}
	printUnreachable(a.stdout, rep.Masters)
}

// shown is a leader's value fit for a table: as is when it is one run of
// printable characters, else quoted.
func shown(v string) string {
	if v != "" && strings.IndexFunc(v, func(r rune) bool { return !unicode.IsGraphic(r) || unicode.IsSpace(r) }) < 0 {
		return v
	}
	return strconv.Quote(v)
}
