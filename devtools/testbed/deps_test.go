package testbed_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// heavyDeps are the import paths the bed's core must not link: etcd's
// client and gRPC, which it brings (about 85 packages). The core reaches
// etcd through the HTTP JSON gateway; etcdbed has the official client.
var heavyDeps = []string{"go.etcd.io", "google.golang.org/grpc"}

// TestCoreLinksNoEtcdClient keeps etcd's client and gRPC out of the bed's
// core, of the demo binary that `make demo` compiles on a fresh machine
// (quorumbed with -tags nodocker), and of bedtest, which most test
// packages import: each would compile them otherwise. Only etcdbed, and
// what imports it, may. A failure shows the chain of imports that brings
// each one in. (go list -deps without -test leaves out the packages'
// tests, which may import etcdbed.)
func TestCoreLinksNoEtcdClient(t *testing.T) {
	const mod = "github.com/quorumlock/quorumlock/"
	for _, c := range []struct {
		pkg  string
		tags string
	}{
		{pkg: mod + "devtools/testbed"},
		{pkg: mod + "devtools/testbed", tags: "nodocker"},
		{pkg: mod + "devtools/testbed/bedtest"},
		{pkg: mod + "devtools/cmd/quorumbed", tags: "nodocker"},
	} {
		imports := listDeps(t, c.pkg, c.tags)
		if _, ok := imports[mod+"devtools/testbed"]; !ok {
			t.Fatalf("go list -deps %s listed no testbed, so not the bed's dependencies", c.pkg)
		}
		for _, bad := range heavyDeps {
			if ch := importChain(imports, c.pkg, func(p string) bool { return strings.Contains(p, bad) }); ch != nil {
				t.Errorf("%s (tags %q) links %s, which the bed's core must not:\n  %s",
					c.pkg, c.tags, ch[len(ch)-1], strings.Join(ch, "\n  imports "))
			}
		}
	}
}

// listDeps runs go list -deps on pkg with the build tags and returns every
// dependency with what it imports.
func listDeps(t *testing.T, pkg, tags string) map[string][]string {
	t.Helper()
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the bed's dependencies: %v", err)
	}
	cmd := exec.Command(gocmd, "list", "-deps", "-tags", tags, "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", pkg)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps -tags %q %s: %v\n%s", tags, pkg, err, stderr.String())
	}
	imports := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) > 0 {
			imports[f[0]] = f[1:]
		}
	}
	return imports
}

// importChain is the shortest chain of imports from self to a package
// that bad matches, or nil.
func importChain(imports map[string][]string, self string, bad func(string) bool) []string {
	prev := map[string]string{self: ""}
	queue := []string{self}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if bad(p) {
			var c []string
			for ; p != ""; p = prev[p] {
				c = append(c, p)
			}
			slices.Reverse(c)
			return c
		}
		for _, q := range imports[p] {
			if _, seen := prev[q]; !seen {
				prev[q] = p
				queue = append(queue, q)
			}
		}
	}
	return nil
}
