package testbed_test

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCoreDoesNotImportTesting keeps the bed usable outside tests:
// commands such as quorumctl and lockbench start it with New, so none of
// the package's own code may import testing (bedtest wraps it for tests).
func TestCoreDoesNotImportTesting(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range file.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); path == "testing" {
				t.Errorf("%s imports testing: put test helpers in devtools/testbed/bedtest", f)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no source files found")
	}
}
