package chaos

import (
	"fmt"
	"io"
	"strings"
)

// Pair is one scenario run twice with the same seed: with the fence and
// without it (the negative control).
type Pair struct {
	Scenario Scenario
	Fenced   Result
	Plain    Result
}

// Verdict lists what is wrong with a pair: an unsafe fenced run, a
// negative control that caught nothing, a double grant where the guard
// should have stopped it (or none where the staging must make one), or a
// workload that made no progress. Empty means the pair passed.
func Verdict(p Pair) []string {
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
			bad = append(bad, fmt.Sprintf("%d double grants with the restart guard on", n))
		}
	}
	if f.Injected == 0 && sc.drive != nil && sc.Name != "long-hold" {
		bad = append(bad, "the nemesis injected no fault")
	}
	return bad
}

// Command is the command that reproduces one scenario's row.
func Command(sc Scenario) string {
	return fmt.Sprintf("`go run ./cmd/chaos -only %s`", sc.Name)
}

// WriteMarkdown writes the safety table: one row per pair, and the
// definitions of its columns.
func WriteMarkdown(w io.Writer, pairs []Pair, header string) error {
	var b strings.Builder
	b.WriteString(header)
	b.WriteString("\n| scenario | faults | operations | violations with fencing | violations without fencing | command |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	for _, p := range pairs {
		f, u := p.Fenced, p.Plain
		ops := fmt.Sprintf("%d faults; %d + %d leases; %d + %d writes accepted, %d + %d rejected",
			f.Injected+u.Injected, f.Locks, u.Locks, f.Accepted, u.Accepted, f.Rejected, u.Rejected)
		with := fmt.Sprintf("**%d** (lost %d, stale accepted %d, linearizable %s); %d stale writes rejected; %d double grants",
			f.ViolationCount(), f.Lost, f.StaleAccepted, f.Linearizable, f.Rejected, f.Overlaps)
		without := fmt.Sprintf("**%d** (lost %d, stale accepted %d); %d double grants",
			u.ViolationCount(), u.Lost, u.StaleAccepted, u.Overlaps)
		if p.Scenario.Carts {
			ops = fmt.Sprintf("%d faults; %d + %d leases; %d + %d carts committed, %d + %d rejected by the fence, %d + %d refused for stock",
				f.Injected+u.Injected, f.Locks, u.Locks, f.Accepted, u.Accepted, f.Rejected, u.Rejected, f.Refused, u.Refused)
			with = fmt.Sprintf("**%d** (units lost %d, torn carts %d, stale accepted %d, linearizable %s); %d stale carts rejected; %d double grants",
				f.ViolationCount(), f.Lost, f.Torn, f.StaleAccepted, f.Linearizable, f.Rejected, f.Overlaps)
			without = fmt.Sprintf("**%d** (units lost %d, torn carts %d, stale accepted %d); %d double grants",
				u.ViolationCount(), u.Lost, u.Torn, u.StaleAccepted, u.Overlaps)
		}
		verdict := "pass"
		if v := Verdict(p); len(v) > 0 {
			verdict = "FAIL: " + strings.Join(v, "; ")
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s (%s) |\n", anchor(p.Scenario.Name), p.Scenario.Faults, ops, with, without, Command(p.Scenario), verdict)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// anchor renders a scenario name with an HTML anchor the README links to.
func anchor(name string) string {
	return fmt.Sprintf(`<a id="%s"></a>%s`, Anchor(name), name)
}

// Anchor is the id of a scenario's row in the table, for links.
func Anchor(name string) string {
	return strings.NewReplacer("/", "-", "=", "-").Replace(name)
}
