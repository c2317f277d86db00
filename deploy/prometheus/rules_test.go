package prometheus

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const (
	rulesFile = "deploy/prometheus/alerts.yml"
	testsFile = "deploy/prometheus/alerts_test.yml"
	runbooks  = "docs/OPERATIONS.md"
	// runbookBase is the address every runbook_url starts with.
	runbookBase = "https://github.com/quorumlock/quorumlock/blob/main/docs/OPERATIONS.md#"
)

// root is the repository root, where the promtool commands run.
const root = "../.."

// promtool returns the path of promtool, failing the test when it is
// missing: the rules must never go unchecked.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is not on PATH (%v): run `make deps`, which installs Debian's prometheus package", err)
	}
	return p
}

func run(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, promtool(t), args...)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), out.String())
}

func TestCheckRules(t *testing.T) {
	run(t, "check", "rules", rulesFile)
}

func TestRulesUnitTests(t *testing.T) {
	run(t, "test", "rules", testsFile)
}

func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var (
	alertRE    = regexp.MustCompile(`(?m)^\s*- alert:\s*(\S+)\s*$`)
	runbookRE  = regexp.MustCompile(`(?m)^\s*runbook_url:\s*(\S+)\s*$`)
	severityRE = regexp.MustCompile(`(?m)^\s*severity:\s*(\S+)\s*$`)
	headingRE  = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*$`)
)

// alerts returns the alert names of the rules file, in order, with the
// text of each rule (up to the next one).
func alerts(t *testing.T) (names, bodies []string) {
	t.Helper()
	rules := read(t, rulesFile)
	locs := alertRE.FindAllStringSubmatchIndex(rules, -1)
	if len(locs) == 0 {
		t.Fatalf("%s has no alerts", rulesFile)
	}
	for i, l := range locs {
		end := len(rules)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		names = append(names, rules[l[2]:l[3]])
		bodies = append(bodies, rules[l[0]:end])
	}
	return names, bodies
}

// slug is the anchor GitHub gives a Markdown heading.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Every alert has a severity of one of the three grades and a runbook_url
// whose anchor is a heading of docs/OPERATIONS.md named after the alert.
func TestRunbooks(t *testing.T) {
	anchors := map[string]bool{}
	for _, m := range headingRE.FindAllStringSubmatch(read(t, runbooks), -1) {
		anchors[slug(m[1])] = true
	}
	names, bodies := alerts(t)
	for i, name := range names {
		sev := severityRE.FindStringSubmatch(bodies[i])
		if sev == nil || (sev[1] != "warning" && sev[1] != "page" && sev[1] != "critical") {
			t.Errorf("%s: severity %v, want warning, page or critical", name, sev)
		}
		m := runbookRE.FindAllStringSubmatch(bodies[i], -1)
		if len(m) != 1 {
			t.Errorf("%s: %d runbook_url annotations, want 1", name, len(m))
			continue
		}
		anchor, ok := strings.CutPrefix(m[0][1], runbookBase)
		if !ok {
			t.Errorf("%s: runbook_url %s does not start with %s", name, m[0][1], runbookBase)
			continue
		}
		if anchor != strings.ToLower(name) {
			t.Errorf("%s: runbook anchor #%s, want #%s", name, anchor, strings.ToLower(name))
		}
		if !anchors[anchor] {
			t.Errorf("%s: %s has no heading for #%s (want a heading %q)", name, runbooks, anchor, name)
		}
	}
}

// Every alert is tested at least once firing and once quiet.
func TestEveryAlertFiresAndStaysQuiet(t *testing.T) {
	lines := strings.Split(read(t, testsFile), "\n")
	fires, quiet := map[string]int{}, map[string]int{}
	for i, l := range lines {
		name, ok := strings.CutPrefix(strings.TrimSpace(l), "alertname:")
		if !ok || i+1 == len(lines) {
			continue
		}
		name = strings.TrimSpace(name)
		switch next := strings.TrimSpace(lines[i+1]); {
		case next == "exp_alerts: []":
			quiet[name]++
		case next == "exp_alerts:":
			fires[name]++
		}
	}
	names, _ := alerts(t)
	known := map[string]bool{}
	for _, name := range names {
		known[name] = true
		if fires[name] == 0 {
			t.Errorf("%s: no test case where it fires", name)
		}
		if quiet[name] == 0 {
			t.Errorf("%s: no test case where it stays quiet", name)
		}
	}
	for name := range fires {
		if !known[name] {
			t.Errorf("%s tests an alert that %s does not have", testsFile, name)
		}
	}
	for name := range quiet {
		if !known[name] {
			t.Errorf("%s tests an alert that %s does not have", testsFile, name)
		}
	}
}
