//go:build ignore

// Funclen lists the functions of non-test Go files that are longer than a
// limit, counted from the line of `func` to the line of the closing brace,
// both included (CONTRIBUTING.md: a function fits in 60 lines). It exits 1
// when it finds one.
//
//	go run scripts/funclen.go            # every package under ., limit 60
//	go run scripts/funclen.go -max 40 quorum orders
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// long is one function over the limit.
type long struct {
	pos   token.Position
	name  string
	lines int
}

func main() {
	limit := flag.Int("max", 60, "the most lines a function may have")
	flag.Parse()
	roots := flag.Args()
	if len(roots) == 0 {
		roots = []string{"."}
	}
	var found []long
	for _, root := range roots {
		got, err := scan(root, *limit)
		if err != nil {
			fmt.Fprintln(os.Stderr, "funclen:", err)
			os.Exit(2)
		}
		found = append(found, got...)
	}
	sort.Slice(found, func(i, j int) bool { return found[i].lines > found[j].lines })
	for _, l := range found {
		fmt.Printf("%s:%d: %s is %d lines\n", l.pos.Filename, l.pos.Line, l.name, l.lines)
	}
	if len(found) > 0 {
		fmt.Printf("funclen: %d functions over %d lines\n", len(found), *limit)
		os.Exit(1)
	}
	fmt.Printf("funclen: no function over %d lines\n", *limit)
}

// scan walks root and returns the functions of its non-test Go files that
// are longer than limit, skipping testdata, vendor and hidden directories.
func scan(root string, limit int) ([]long, error) {
	var found []long
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		found = append(found, longFuncs(fset, f, limit)...)
		return nil
	})
	return found, err
}

// longFuncs returns the function declarations of f longer than limit.
func longFuncs(fset *token.FileSet, f *ast.File, limit int) []long {
	var found []long
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		start := fset.Position(fd.Pos())
		n := fset.Position(fd.End()).Line - start.Line + 1
		if n <= limit {
			continue
		}
		name := fd.Name.Name
		if fd.Recv != nil && len(fd.Recv.List) == 1 {
			name = receiver(fd.Recv.List[0].Type) + "." + name
		}
		found = append(found, long{pos: start, name: name, lines: n})
	}
	return found
}

// receiver names a method's receiver type, without its pointer or type
// parameters.
func receiver(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return receiver(t.X)
	case *ast.IndexExpr:
		return receiver(t.X)
	case *ast.IndexListExpr:
		return receiver(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}
