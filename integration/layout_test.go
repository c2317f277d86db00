package integration_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/quorumlock/quorumlock"

// The development tools (the bed, the nemesis, the checkers, the audit, the
// fakes and the dev commands) live under devtools/; the suites under
// integration/. Only packages in those two trees may link a devtools/
// package in their non-test build: the place decides, not a list.

// TestOnlyDevToolsLinkDevTools keeps the dev tools out of every production
// package: none outside devtools/ and integration/ imports a devtools/
// package in its non-test build (go list -deps without -test leaves tests
// out), on the default build and on each build tag the repository uses.
func TestOnlyDevToolsLinkDevTools(t *testing.T) {
	for _, tags := range []string{"", "failpoints", "nodocker"} {
		imports := moduleImports(t, tags)
		// The listing must hold the edges the rule is about, or an empty
		// one would pass: a dev tool that links the bed, and production.
		if !slices.Contains(imports[mod+"/devtools/cmd/quorumbed"], mod+"/devtools/testbed") {
			t.Fatalf("tags %q: go list shows no devtools/cmd/quorumbed -> devtools/testbed import; the listing is not the module's", tags)
		}
		if _, ok := imports[mod+"/orders"]; !ok {
			t.Fatalf("tags %q: go list does not list %s/orders", tags, mod)
		}
		for _, o := range offenders(imports) {
			t.Errorf("tags %q: %s: only devtools/... and integration/... may link the dev tools", tags, o)
		}
		// Negative control on the real listing: one production import of
		// the bed added, and the check must name it.
		bad := make(map[string][]string, len(imports))
		for p, deps := range imports {
			bad[p] = deps
		}
		bad[mod+"/orders"] = append(slices.Clip(bad[mod+"/orders"]), mod+"/devtools/testbed")
		if got, want := offenders(bad), mod+"/orders imports "+mod+"/devtools/testbed"; !slices.Contains(got, want) {
			t.Fatalf("tags %q: offenders missed an added import: got %q, want it to hold %q", tags, got, want)
		}
	}
}

// TestOffendersCatchesEachKind is the negative control of the check on a
// synthetic listing: it must name every production package that imports an
// integration/ package (the bare package included), and only those.
func TestOffendersCatchesEachKind(t *testing.T) {
	imports := map[string][]string{
		mod + "/orders":                   {mod + "/orders/store", mod + "/devtools/testbed"},
		mod + "/orders/payment":           {"context", mod + "/devtools/fakepay"},
		mod + "/cmd/ordersd":              {mod + "/devtools"},
		mod + "/cmd/quorumbed":            {mod + "/devtools/testbed"}, // a command outside devtools/
		mod + "/devtoolsx/cmd":            {mod + "/devtools/audit"},   // a tree's name is matched whole
		mod + "/devtools/cmd/quorumbed":   {mod + "/devtools/testbed", mod + "/devtools/audit"},
		mod + "/devtools/storetest":       {mod + "/devtools/testbed", mod + "/orders/store"},
		mod + "/integration/storetestuse": {mod + "/devtools/storetest"},
		mod + "/internal/tools":           {mod + "/devtoolskit"}, // not under devtools/
		"example.com/other":               {mod + "/devtools/testbed"},
	}
	want := []string{
		mod + "/cmd/ordersd imports " + mod + "/devtools",
		mod + "/cmd/quorumbed imports " + mod + "/devtools/testbed",
		mod + "/devtoolsx/cmd imports " + mod + "/devtools/audit",
		mod + "/orders imports " + mod + "/devtools/testbed",
		mod + "/orders/payment imports " + mod + "/devtools/fakepay",
	}
	if got := offenders(imports); !slices.Equal(got, want) {
		t.Fatalf("offenders:\n got %q\nwant %q", got, want)
	}
	if got := offenders(map[string][]string{mod + "/orders": {mod + "/orders/store"}}); len(got) != 0 {
		t.Fatalf("a clean listing has offenders: %q", got)
	}
}

// offenders lists, sorted, each import of a devtools/ package by a package
// of the module outside devtools/ and integration/, as "pkg imports dep".
func offenders(imports map[string][]string) []string {
	var out []string
	for pkg, deps := range imports {
		if !strings.HasPrefix(pkg, mod+"/") || under(pkg, "devtools") || under(pkg, "integration") {
			continue
		}
		for _, d := range deps {
			if under(d, "devtools") {
				out = append(out, pkg+" imports "+d)
			}
		}
	}
	slices.Sort(out)
	return out
}

// under reports whether p is the module's tree dir or a package in it.
func under(p, dir string) bool {
	return p == mod+"/"+dir || strings.HasPrefix(p, mod+"/"+dir+"/")
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
