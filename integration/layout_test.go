package integration_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/quorumlock/quorumlock"

// devTools are the only packages outside integration/ whose build may link
// integration/... (the test bed and the test support beside it): the dev
// tools of cmd/. Production packages and the other commands may not.
var devTools = []string{mod + "/cmd/quorumbed", mod + "/cmd/lockbench", mod + "/cmd/orderbench", mod + "/cmd/chaos"}

// TestOnlyDevToolsLinkTestSupport keeps the test bed and the test support
// (storetest, payfake, audit, ...) out of every production package: none
// outside integration/ and the dev tools imports an integration/ package
// in its non-test build (go list -deps without -test leaves tests out), on
// the default build and on each build tag the repository uses.
func TestOnlyDevToolsLinkTestSupport(t *testing.T) {
	for _, tags := range []string{"", "failpoints", "nodocker"} {
		imports := moduleImports(t, tags)
		// The listing must hold the edges the rule is about, or an empty
		// one would pass: a dev tool that links the bed, and production.
		if !slices.Contains(imports[mod+"/cmd/quorumbed"], mod+"/integration/testbed") {
			t.Fatalf("tags %q: go list shows no cmd/quorumbed -> integration/testbed import; the listing is not the module's", tags)
		}
		if _, ok := imports[mod+"/orders"]; !ok {
			t.Fatalf("tags %q: go list does not list %s/orders", tags, mod)
		}
		for _, o := range offenders(imports) {
			t.Errorf("tags %q: %s: only integration/... and the dev tools (%s) may link test support",
				tags, o, strings.Join(devTools, ", "))
		}
		// Negative control on the real listing: one production import of
		// the bed added, and the check must name it.
		bad := make(map[string][]string, len(imports))
		for p, deps := range imports {
			bad[p] = deps
		}
		bad[mod+"/orders"] = append(slices.Clip(bad[mod+"/orders"]), mod+"/integration/testbed")
		if got, want := offenders(bad), mod+"/orders imports "+mod+"/integration/testbed"; !slices.Contains(got, want) {
			t.Fatalf("tags %q: offenders missed an added import: got %q, want it to hold %q", tags, got, want)
		}
	}
}

// TestOffendersCatchesEachKind is the negative control of the check on a
// synthetic listing: it must name every production package that imports an
// integration/ package (the bare package included), and only those.
func TestOffendersCatchesEachKind(t *testing.T) {
	imports := map[string][]string{
		mod + "/orders":                {mod + "/orders/store", mod + "/integration/testbed"},
		mod + "/orders/payment":        {"context", mod + "/integration/payfake"},
		mod + "/cmd/ordersd":           {mod + "/integration"},
		mod + "/cmd/quorumbedx":        {mod + "/integration/audit"}, // a dev tool's name is matched whole
		mod + "/cmd/quorumbed":         {mod + "/integration/testbed", mod + "/integration/audit"},
		mod + "/cmd/chaos":             {mod + "/integration/chaos"},
		mod + "/integration/storetest": {mod + "/integration/testbed", mod + "/orders/store"},
		mod + "/internal/tools":        {mod + "/integrationkit"}, // not under integration/
		"example.com/other":            {mod + "/integration/testbed"},
	}
	want := []string{
		mod + "/cmd/ordersd imports " + mod + "/integration",
		mod + "/cmd/quorumbedx imports " + mod + "/integration/audit",
		mod + "/orders imports " + mod + "/integration/testbed",
		mod + "/orders/payment imports " + mod + "/integration/payfake",
	}
	if got := offenders(imports); !slices.Equal(got, want) {
		t.Fatalf("offenders:\n got %q\nwant %q", got, want)
	}
	if got := offenders(map[string][]string{mod + "/orders": {mod + "/orders/store"}}); len(got) != 0 {
		t.Fatalf("a clean listing has offenders: %q", got)
	}
}

// offenders lists, sorted, each import of an integration/ package by a
// package of the module that is neither under integration/ nor a dev tool,
// as "pkg imports dep".
func offenders(imports map[string][]string) []string {
	var out []string
	for pkg, deps := range imports {
		if !strings.HasPrefix(pkg, mod+"/") || isTestSupport(pkg) || slices.Contains(devTools, pkg) {
			continue
		}
		for _, d := range deps {
			if isTestSupport(d) {
				out = append(out, pkg+" imports "+d)
			}
		}
	}
	slices.Sort(out)
	return out
}

// isTestSupport reports whether p is integration or a package under it.
func isTestSupport(p string) bool {
	return p == mod+"/integration" || strings.HasPrefix(p, mod+"/integration/")
}

// moduleImports runs go list -deps over the module's packages with the
// build tags and returns what each non-standard package imports.
func moduleImports(t *testing.T, tags string) map[string][]string {
	t.Helper()
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the module's imports: %v", err)
	}
	cmd := exec.Command(gocmd, "list", "-deps", "-tags", tags,
		"-f", "{{if not .Standard}}{{.ImportPath}}{{range .Imports}} {{.}}{{end}}{{end}}", mod+"/...")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps -tags %q %s/...: %v\n%s", tags, mod, err, stderr.String())
	}
	imports := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) > 0 {
			imports[f[0]] = f[1:]
		}
	}
	return imports
}
