package chaos

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// Pair is one scenario run twice with the same seed: with the fence and
// without it (the negative control). A scenario that does not apply to its
// lock (Scenario.NA) has no runs.
type Pair struct {
	Scenario Scenario
	// Seed is the seed both runs used.
	Seed   uint64
	Fenced Result
	Plain  Result
}

// Row is one scenario on one lock over every seed it ran on: its pairs, in
// the order they ran. A verdict from one run is a guess; a row's tally
// says in how many runs each figure held.
type Row struct {
	Scenario Scenario
	Pairs    []Pair
}

// Rows groups pairs by scenario and lock, in the order each first appears.
func Rows(pairs []Pair) []Row {
	var rows []Row
	at := map[string]int{}
	for _, p := range pairs {
		i, ok := at[p.Scenario.ID()]
		if !ok {
			i = len(rows)
			at[p.Scenario.ID()] = i
			rows = append(rows, Row{Scenario: p.Scenario})
		}
		rows[i].Pairs = append(rows[i].Pairs, p)
	}
	return rows
}

// Failures lists the verdicts of the row's failed runs, one line per run,
// each with its seed; empty when every run passed or the row does not
// apply.
func (r Row) Failures() []string {
	var out []string
	for _, p := range r.Pairs {
		if v := Verdict(p); len(v) > 0 {
			out = append(out, fmt.Sprintf("seed %d: %s", p.Seed, strings.Join(v, "; ")))
		}
	}
	return out
}

// Verdict lists what is wrong with a pair: an unsafe fenced run, a
// negative control that caught nothing, a double grant where the guard
// should have stopped it (or none where the staging must make one), or a
// workload that made no progress. Empty means the pair passed, or does not
// apply.
func Verdict(p Pair) []string {
	if p.Scenario.NA != "" {
		return nil
	}
	if p.Scenario.Prim == PrimCounter {
		return counterVerdict(p)
	}
	var bad []string
	sc, f, u := p.Scenario, p.Fenced, p.Plain
	for _, v := range f.Violations {
		bad = append(bad, "with fencing: "+v)
	}
	if f.Accepted == 0 || u.Accepted == 0 {
		bad = append(bad, fmt.Sprintf("no progress: %d fenced and %d unfenced writes accepted", f.Accepted, u.Accepted))
	}
	if sc.Staged && sc.Prim != "" {
		bad = append(bad, primControl(sc, u)...)
	}
	if sc.Staged {
		if sc.Prim == "" && u.Lost <= 0 {
			bad = append(bad, "negative control: the unfenced run lost no update, so the staging did not bite")
		}
		if f.Rejected == 0 {
			bad = append(bad, "with fencing: no stale write was rejected, so no late write was staged")
		}
		if sc.Carts && u.Torn == 0 {
			bad = append(bad, "negative control: every unfenced cart took exactly its units off its rows, so the cart check did not bite")
		}
	}
	if sc.DoubleGrant != nil {
		n := f.Overlaps + u.Overlaps
		switch {
		case *sc.DoubleGrant && n == 0:
			bad = append(bad, "no double grant: the staging must make the lock grant the key twice")
		case !*sc.DoubleGrant && n > 0:
			on := ""
			if sc.Guard {
				on = " (restart guard on)"
			}
			bad = append(bad, fmt.Sprintf("%d double grants where the lock must grant the key once%s", n, on))
		}
	}
	if f.Injected == 0 && sc.drive != nil && sc.Name != "long-hold" {
		bad = append(bad, "the nemesis injected no fault")
	}
	return bad
}

// Command is the command that reproduces one scenario's row: its runs on
// seeds from seed on, repeat of them.
func Command(sc Scenario, seed uint64, repeat int) string {
	c := fmt.Sprintf("go run ./devtools/cmd/chaos -only %s -lock %s -seed %d", sc.Name, sc.Lock, seed)
	if repeat > 1 {
		c += fmt.Sprintf(" -repeat %d", repeat)
	}
	return "`" + c + "`"
}

// WriteMarkdown writes the safety table: the verdicts of both locks side
// by side, one row per scenario with each figure tallied over its runs
// (pairs may hold several runs of a scenario, one per seed), then one row
// per scenario and lock with its faults, its operations and its command,
// and the definitions of the columns.
func WriteMarkdown(w io.Writer, pairs []Pair, header string) error {
	rows := Rows(pairs)
	var b strings.Builder
	b.WriteString(header)
	b.WriteString("\n### Side by side\n\n| scenario |")
	for _, l := range Locks {
		fmt.Fprintf(&b, " %s: with fencing | %s: without fencing |", l, l)
	}
	b.WriteString(" verdicts |\n|---|" + strings.Repeat("---|---|", len(Locks)) + "---|\n")
	for _, name := range scenarioNames(rows) {
		fmt.Fprintf(&b, "| %s |", anchor(name, ""))
		var verdicts []string
		for _, l := range Locks {
			r, ok := find(rows, name, l)
			with, without, verdict := cells(r, ok)
			fmt.Fprintf(&b, " %s | %s |", with, without)
			verdicts = append(verdicts, l+": "+verdict)
		}
		fmt.Fprintf(&b, " %s |\n", strings.Join(verdicts, "; "))
	}
	b.WriteString("\n### Each row\n\n| scenario | lock | faults | operations | command |\n|---|---|---|---|---|\n")
	for _, r := range rows {
		sc := r.Scenario
		if sc.NA != "" {
			fmt.Fprintf(&b, "| %s | %s | **n/a on %s**: %s | - | - |\n", anchor(sc.Name, sc.Lock), sc.Lock, sc.Lock, sc.NA)
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s (%s) |\n", anchor(sc.Name, sc.Lock), sc.Lock, sc.Faults, operations(r),
			Command(sc, r.Pairs[0].Seed, len(r.Pairs)), verdictText(r))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// scenarioNames lists the scenarios of rows, in order, once each.
func scenarioNames(rows []Row) []string {
	var names []string
	for _, r := range rows {
		if !slices.Contains(names, r.Scenario.Name) {
			names = append(names, r.Scenario.Name)
		}
	}
	return names
}

func find(rows []Row, name, lock string) (Row, bool) {
	for _, r := range rows {
		if r.Scenario.Name == name && r.Scenario.Lock == lock {
			return r, true
		}
	}
	return Row{}, false
}

// verdictText is a row's verdict: in how many runs it passed, or which
// runs failed and why.
func verdictText(r Row) string {
	n := len(r.Pairs)
	switch f := r.Failures(); {
	case r.Scenario.NA != "":
		return "n/a"
	case len(f) > 0:
		return fmt.Sprintf("FAIL in %d of %d runs: %s", len(f), n, strings.Join(f, "; "))
	}
	return fmt.Sprintf("pass in %d of %d runs", n, n)
}

// cells renders a row's results with fencing and without, each figure
// tallied over its runs, and its verdict; ok false: the row was not run
// this time.
func cells(r Row, ok bool) (with, without, verdict string) {
	switch {
	case !ok:
		return "not run", "not run", "not run"
	case r.Scenario.NA != "":
		return "n/a", "n/a", "n/a (see its row below)"
	}
	return side(r, true), side(r, false), verdictText(r)
}

// side renders the runs of a row with the fence, or without it.
func side(r Row, withFence bool) string {
	run := func(p Pair) Result { return p.Plain }
	if withFence {
		run = func(p Pair) Result { return p.Fenced }
	}
	t := sum(r.Pairs, run)
	violations := bold(perRun(r.Pairs, run, Result.ViolationCount, "violations"))
	grants := perRun(r.Pairs, run, func(x Result) int64 { return int64(x.Overlaps) }, "double grants")
	lost, unit := fmt.Sprintf("lost %d", t.Lost), "writes"
	if r.Scenario.Prim != "" {
		lost, unit = primFigures(r.Scenario, t), "operations"
	}
	if r.Scenario.Carts {
		lost, unit = fmt.Sprintf("units lost %d, torn carts %d", t.Lost, t.Torn), "carts"
	}
	if !withFence || r.Scenario.Prim == PrimCounter {
		return fmt.Sprintf("%s (%s, stale accepted %d); %s", violations, lost, t.StaleAccepted, grants)
	}
	if r.Scenario.Prim != "" {
		return fmt.Sprintf("%s (%s, stale accepted %d); %d stale %s rejected; %s", violations, lost, t.StaleAccepted, t.Rejected, unit, grants)
	}
	return fmt.Sprintf("%s (%s, stale accepted %d, linearizable in %d of %d); %d stale %s rejected; %s",
		violations, lost, t.StaleAccepted, t.linearizable, len(r.Pairs), t.Rejected, unit, grants)
}

func bold(s string) string { return "**" + s + "**" }

// perRun tallies one figure over the runs of pairs: "0 double grants in 3
// of 3 runs" when it was 0 in every run, else in how many runs it was not
// and each run's figure, in seed order: "double grants in 1 of 3 runs (0,
// 2, 0)".
func perRun(pairs []Pair, run func(Pair) Result, figure func(Result) int64, what string) string {
	n, counts, nonzero := len(pairs), make([]string, len(pairs)), 0
	for i, p := range pairs {
		c := figure(run(p))
		if c != 0 {
			nonzero++
		}
		counts[i] = fmt.Sprint(c)
	}
	if nonzero == 0 {
		return fmt.Sprintf("0 %s in %d of %d runs", what, n, n)
	}
	return fmt.Sprintf("%s in %d of %d runs (%s)", what, nonzero, n, strings.Join(counts, ", "))
}

// totals is the sum of one side's results over a row's runs.
type totals struct {
	Result
	linearizable int // runs whose history porcupine found linearizable
}

func sum(pairs []Pair, run func(Pair) Result) totals {
	var t totals
	for _, p := range pairs {
		r := run(p)
		t.Lost += r.Lost
		t.Torn += r.Torn
		t.Broken += r.Broken
		t.MaxHolders = max(t.MaxHolders, r.MaxHolders)
		t.StaleAccepted += r.StaleAccepted
		t.Rejected += r.Rejected
		if r.Linearizable == "yes" {
			t.linearizable++
		}
	}
	return t
}

// total adds one figure over both runs of every pair.
func total(pairs []Pair, figure func(Result) int) (fencedRuns, plainRuns int) {
	for _, p := range pairs {
		fencedRuns += figure(p.Fenced)
		plainRuns += figure(p.Plain)
	}
	return fencedRuns, plainRuns
}

// operations renders what a row's runs did, summed over its seeds.
func operations(r Row) string {
	fl, ul := total(r.Pairs, func(x Result) int { return x.Locks })
	fa, ua := total(r.Pairs, func(x Result) int { return x.Accepted })
	fr, ur := total(r.Pairs, func(x Result) int { return x.Rejected })
	fi, ui := total(r.Pairs, func(x Result) int { return x.Injected })
	runs := fmt.Sprintf("%d runs (seeds %d to %d)", len(r.Pairs), r.Pairs[0].Seed, r.Pairs[len(r.Pairs)-1].Seed)
	if len(r.Pairs) == 1 {
		runs = fmt.Sprintf("1 run (seed %d)", r.Pairs[0].Seed)
	}
	if r.Scenario.Carts {
		fc, uc := total(r.Pairs, func(x Result) int { return x.Refused })
		return fmt.Sprintf("%s; %d faults; %d + %d leases; %d + %d carts committed, %d + %d rejected by the fence, %d + %d refused for stock",
			runs, fi+ui, fl, ul, fa, ua, fr, ur, fc, uc)
	}
	return fmt.Sprintf("%s; %d faults; %d + %d leases; %d + %d writes accepted, %d + %d rejected", runs, fi+ui, fl, ul, fa, ua, fr, ur)
}

// anchor renders a scenario name with an HTML anchor the README links to:
// the scenario's (lock "") or its row on one lock.
func anchor(name, lock string) string {
	id := Anchor(name)
	if lock != "" {
		id += "-" + lock
	}
	return fmt.Sprintf(`<a id="%s"></a>%s`, id, name)
}

// Anchor is the id of a scenario's row in the side-by-side table, for
// links; its row on one lock in the table of runs adds "-" and the lock.
func Anchor(name string) string {
	return strings.NewReplacer("/", "-", "=", "-").Replace(name)
}
