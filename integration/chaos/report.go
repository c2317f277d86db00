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
	Fenced   Result
	Plain    Result
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
	var bad []string
	sc, f, u := p.Scenario, p.Fenced, p.Plain
	for _, v := range f.Violations {
		bad = append(bad, "with fencing: "+v)
	}
	if f.Accepted == 0 || u.Accepted == 0 {
		bad = append(bad, fmt.Sprintf("no progress: %d fenced and %d unfenced writes accepted", f.Accepted, u.Accepted))
	}
	if sc.Staged {
		if u.Lost <= 0 {
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

// Command is the command that reproduces one scenario's row.
func Command(sc Scenario) string {
	return fmt.Sprintf("`go run ./cmd/chaos -only %s -lock %s`", sc.Name, sc.Lock)
}

// WriteMarkdown writes the safety table: the verdicts of both locks side
// by side, one row per scenario, then one row per scenario and lock with
// its faults, its operations and its command, and the definitions of the
// columns.
func WriteMarkdown(w io.Writer, pairs []Pair, header string) error {
	var b strings.Builder
	b.WriteString(header)
	b.WriteString("\n### Side by side\n\n| scenario |")
	for _, l := range Locks {
		fmt.Fprintf(&b, " %s: with fencing | %s: without fencing |", l, l)
	}
	b.WriteString(" verdicts |\n|---|" + strings.Repeat("---|---|", len(Locks)) + "---|\n")
	for _, name := range scenarioNames(pairs) {
		fmt.Fprintf(&b, "| %s |", anchor(name, ""))
		var verdicts []string
		for _, l := range Locks {
			p, ok := find(pairs, name, l)
			with, without, verdict := cells(p, ok)
			fmt.Fprintf(&b, " %s | %s |", with, without)
			verdicts = append(verdicts, l+": "+verdict)
		}
		fmt.Fprintf(&b, " %s |\n", strings.Join(verdicts, "; "))
	}
	b.WriteString("\n### Each run\n\n| scenario | lock | faults | operations | command |\n|---|---|---|---|---|\n")
	for _, p := range pairs {
		sc := p.Scenario
		if sc.NA != "" {
			fmt.Fprintf(&b, "| %s | %s | **n/a on %s**: %s | - | - |\n", anchor(sc.Name, sc.Lock), sc.Lock, sc.Lock, sc.NA)
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s (%s) |\n", anchor(sc.Name, sc.Lock), sc.Lock, sc.Faults, operations(p), Command(sc), verdictText(p))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// scenarioNames lists the scenarios of pairs, in order, once each.
func scenarioNames(pairs []Pair) []string {
	var names []string
	for _, p := range pairs {
		if !slices.Contains(names, p.Scenario.Name) {
			names = append(names, p.Scenario.Name)
		}
	}
	return names
}

func find(pairs []Pair, name, lock string) (Pair, bool) {
	for _, p := range pairs {
		if p.Scenario.Name == name && p.Scenario.Lock == lock {
			return p, true
		}
	}
	return Pair{}, false
}

func verdictText(p Pair) string {
	switch v := Verdict(p); {
	case p.Scenario.NA != "":
		return "n/a"
	case len(v) > 0:
		return "FAIL: " + strings.Join(v, "; ")
	}
	return "pass"
}

// cells renders a pair's results with fencing and without, and its
// verdict; ok false: the pair was not run this time.
func cells(p Pair, ok bool) (with, without, verdict string) {
	f, u := p.Fenced, p.Plain
	switch {
	case !ok:
		return "not run", "not run", "not run"
	case p.Scenario.NA != "":
		return "n/a", "n/a", "n/a (see its row below)"
	case p.Scenario.Carts:
		with = fmt.Sprintf("**%d** (units lost %d, torn carts %d, stale accepted %d, linearizable %s); %d stale carts rejected; %d double grants",
			f.ViolationCount(), f.Lost, f.Torn, f.StaleAccepted, f.Linearizable, f.Rejected, f.Overlaps)
		without = fmt.Sprintf("**%d** (units lost %d, torn carts %d, stale accepted %d); %d double grants",
			u.ViolationCount(), u.Lost, u.Torn, u.StaleAccepted, u.Overlaps)
	default:
		with = fmt.Sprintf("**%d** (lost %d, stale accepted %d, linearizable %s); %d stale writes rejected; %d double grants",
			f.ViolationCount(), f.Lost, f.StaleAccepted, f.Linearizable, f.Rejected, f.Overlaps)
		without = fmt.Sprintf("**%d** (lost %d, stale accepted %d); %d double grants",
			u.ViolationCount(), u.Lost, u.StaleAccepted, u.Overlaps)
	}
	return with, without, verdictText(p)
}

// operations renders what a pair's two runs did.
func operations(p Pair) string {
	f, u := p.Fenced, p.Plain
	if p.Scenario.Carts {
		return fmt.Sprintf("%d faults; %d + %d leases; %d + %d carts committed, %d + %d rejected by the fence, %d + %d refused for stock",
			f.Injected+u.Injected, f.Locks, u.Locks, f.Accepted, u.Accepted, f.Rejected, u.Rejected, f.Refused, u.Refused)
	}
	return fmt.Sprintf("%d faults; %d + %d leases; %d + %d writes accepted, %d + %d rejected",
		f.Injected+u.Injected, f.Locks, u.Locks, f.Accepted, u.Accepted, f.Rejected, u.Rejected)
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
