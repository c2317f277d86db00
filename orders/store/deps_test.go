package store_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestStoreKnowsNoHTTP keeps the order path one-directional: the store
// saves what the orders package rendered and never renders a response
// itself, so none of its code imports net/http or the problem package.
func TestStoreKnowsNoHTTP(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range file.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			switch {
			case path == "net/http", strings.HasPrefix(path, "net/http/"), strings.HasSuffix(path, "/orders/problem"),
				path == "github.com/quorumlock/quorumlock/orders":
				t.Errorf("%s imports %s: the store must take rendered answers as data", f, path)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no source files found")
	}
}
