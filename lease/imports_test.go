package lease_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/quorumlock/quorumlock/"

// importRules says what each package of the lease API's family must not
// link, directly or through others: an etcd-only user links no go-redis, a
// Redis-only user no etcd client, and anyone the lease API alone.
var importRules = []struct {
	pkg       string
	forbidden []string // import paths and the trees under them; "*": any non-standard package
}{
	{module + "lease", []string{"*"}},
	{module + "etcdlock", []string{"github.com/redis/go-redis", module + "quorum"}},
	{module + "quorum", []string{"go.etcd.io/", module + "etcdlock"}},
	{module + "quorum/quorumprom", []string{"github.com/redis/go-redis", "go.etcd.io/", module + "quorum", module + "etcdlock"}},
}

// violations returns the packages of deps (a go list -deps listing) that
// start with one of forbidden, pkg itself aside.
func violations(pkg string, deps, forbidden []string) []string {
	var bad []string
	for _, d := range deps {
		if d == pkg {
			continue
		}
		if slices.ContainsFunc(forbidden, func(f string) bool { return under(d, f) }) {
			bad = append(bad, d)
		}
	}
	return bad
}

// under reports whether import path d is f or in the tree under f (f may
// end in "/"); f "*" matches everything.
func under(d, f string) bool {
	f = strings.TrimSuffix(f, "/")
	return f == "*" || d == f || strings.HasPrefix(d, f+"/")
}

func TestImports(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	for _, r := range importRules {
		// Non-standard dependencies only: the standard library is always allowed.
		out, err := exec.Command(goTool, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", r.pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", r.pkg, err)
		}
		deps := strings.Fields(string(out))
		if !slices.Contains(deps, r.pkg) {
			t.Fatalf("go list -deps %s does not list the package itself: %q", r.pkg, deps)
		}
		if bad := violations(r.pkg, deps, r.forbidden); len(bad) > 0 {
			t.Errorf("%s links %q", r.pkg, bad)
		}
	}
}

// The check finds what it looks for: a synthetic listing of an etcdlock
// that links go-redis through quorum fails it, and a clean one passes.
func TestImportsNegativeControl(t *testing.T) {
	etcd := importRules[1]
	dirty := []string{"go.etcd.io/etcd/client/v3", "github.com/redis/go-redis/v9/internal/pool", "github.com/redis/go-redis/v9", module + "quorum", module + "lease", etcd.pkg}
	if bad := violations(etcd.pkg, dirty, etcd.forbidden); len(bad) != 3 {
		t.Errorf("dirty listing: violations %q, want go-redis twice and quorum", bad)
	}
	clean := []string{"go.etcd.io/etcd/client/v3", module + "lease", module + "quorumlike", etcd.pkg}
	if bad := violations(etcd.pkg, clean, etcd.forbidden); len(bad) != 0 {
		t.Errorf("clean listing: violations %q, want none", bad)
	}
	api := importRules[0]
	if bad := violations(api.pkg, []string{"github.com/redis/go-redis/v9", api.pkg}, api.forbidden); len(bad) != 1 {
		t.Errorf("lease linking go-redis: violations %q, want one", bad)
	}
}
