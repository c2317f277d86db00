//go:build ignore

// Testtimes reads `go test -json` and prints what a plain `go test` would
// (each package's ok/FAIL line, and the whole output of a test or package
// that fails), then, at the end, every package's time, slowest first, and
// the slowest tests. It exits 1 when a package, a test or a build failed,
// and 2 when the stream ends before a package reported its end (a killed
// go test). `make test` (scripts/gotest.sh) pipes each of its go test runs
// through it, keeps the streams with -save, and prints the tables of all
// of them with -table.
//
//	go test -json ./... | go run scripts/testtimes.go
//	go test -json -race ./quorum/ | go run scripts/testtimes.go -label race -save race.json -summary=false
//	go run scripts/testtimes.go -table race.json plain.json
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Time        time.Time
	Action      string
	Package     string
	Test        string
	Elapsed     float64
	Output      string
	ImportPath  string
	FailedBuild string
}

// pkgTime is one package's end.
type pkgTime struct {
	label, pkg, action string
	elapsed            float64
}

// testTime is one top-level test's end.
type testTime struct {
	pkg, test string
	elapsed   float64
}

// tally is what a stream held.
type tally struct {
	pkgs    []pkgTime
	tests   []testTime
	started map[string]bool
	failed  bool
	first   time.Time
	last    time.Time
}

func main() {
	save := flag.String("save", "", "also append the raw stream to this file")
	label := flag.String("label", "", "the run's name in the table (e.g. race)")
	table := flag.Bool("table", false, "read the saved streams named as arguments and print only the tables")
	summary := flag.Bool("summary", true, "print the tables at the end of the stream")
	top := flag.Int("tests", 15, "how many of the slowest tests the table lists")
	flag.Parse()
	if *table {
		os.Exit(tables(flag.Args(), *top))
	}
	var sink io.Writer = io.Discard
	if *save != "" {
		f, err := os.OpenFile(*save, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testtimes:", err)
			os.Exit(2)
		}
		defer f.Close()
		sink = f
	}
	t := read(os.Stdin, sink, os.Stdout, *label)
	if *summary {
		printTables(os.Stdout, []*tally{t}, *top)
	}
	os.Exit(t.code())
}

// tables prints the tables of the saved streams, one per file, in one
// ranking.
func tables(files []string, top int) int {
	var all []*tally
	code := 0
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testtimes:", err)
			return 2
		}
		label := strings.TrimSuffix(name[strings.LastIndex(name, "/")+1:], ".json")
		t := read(f, io.Discard, io.Discard, label)
		_ = f.Close()
		all = append(all, t)
		code = max(code, t.code())
	}
	printTables(os.Stdout, all, top)
	return code
}

// code is the exit status the stream calls for.
func (t *tally) code() int {
	switch {
	case t.failed:
		return 1
	case len(t.started) > 0:
		return 2
	}
	return 0
}

// read consumes a stream, copying each line to sink and the plain output
// to out.
func read(r io.Reader, sink, out io.Writer, label string) *tally {
	t := &tally{started: map[string]bool{}}
	held := map[string][]string{} // output of a test (pkg + " " + test) or package until it ends
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1024*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		fmt.Fprintf(sink, "%s\n", line)
		var e event
		if json.Unmarshal(line, &e) != nil || e.Action == "" {
			fmt.Fprintf(out, "%s\n", line) // go test's own messages
			continue
		}
		t.see(e, held, out, label)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(out, "testtimes: reading the stream:", err)
		t.failed = true
	}
	for pkg := range t.started {
		fmt.Fprintf(out, "testtimes: %s never reported its end (go test killed, or its -timeout?)\n", pkg)
	}
	return t
}

// see takes one event into t, and writes what a plain go test would.
func (t *tally) see(e event, held map[string][]string, out io.Writer, label string) {
	if !e.Time.IsZero() {
		if t.first.IsZero() || e.Time.Before(t.first) {
			t.first = e.Time
		}
		if e.Time.After(t.last) {
			t.last = e.Time
		}
	}
	switch e.Action {
	case "build-output":
		fmt.Fprint(out, e.Output)
		return
	case "build-fail":
		t.failed = true
		return
	case "start":
		t.started[e.Package] = true
	}
	key := e.Package + " " + e.Test
	switch e.Action {
	case "output":
		held[key] = append(held[key], e.Output)
	case "pass", "skip":
		t.end(e, label)
		if e.Test == "" {
			writeLast(out, held[key]) // ok pkg 1.2s, or no test files
		}
		delete(held, key)
	case "fail":
		t.failed = true
		t.end(e, label)
		fmt.Fprint(out, strings.Join(held[key], ""))
		delete(held, key)
	}
}

// end records the end of a package or a top-level test.
func (t *tally) end(e event, label string) {
	switch {
	case e.Test == "":
		delete(t.started, e.Package)
		t.pkgs = append(t.pkgs, pkgTime{label: label, pkg: e.Package, action: e.Action, elapsed: e.Elapsed})
	case !strings.Contains(e.Test, "/"):
		t.tests = append(t.tests, testTime{pkg: e.Package, test: e.Test, elapsed: e.Elapsed})
	}
}

// writeLast writes the last line of a package's output: its ok line.
func writeLast(out io.Writer, lines []string) {
	if len(lines) > 0 {
		fmt.Fprint(out, lines[len(lines)-1])
	}
}

// print writes the package table, slowest first, and the slowest tests.
func printTables(out io.Writer, ts []*tally, top int) {
	var pkgs []pkgTime
	var tests []testTime
	var sum float64
	for _, t := range ts {
		pkgs = append(pkgs, t.pkgs...)
		tests = append(tests, t.tests...)
	}
	sort.SliceStable(pkgs, func(i, j int) bool { return pkgs[i].elapsed > pkgs[j].elapsed })
	sort.SliceStable(tests, func(i, j int) bool { return tests[i].elapsed > tests[j].elapsed })
	fmt.Fprintf(out, "\npackage times, slowest first (seconds):\n")
	for _, p := range pkgs {
		if p.action == "skip" && p.elapsed == 0 {
			continue // no test files
		}
		sum += p.elapsed
		fmt.Fprintf(out, "%8.1f  %-6s %-5s %s\n", p.elapsed, p.label, p.action, trim(p.pkg))
	}
	fmt.Fprintf(out, "%8.1f  in all (packages run side by side, so the wall time is less)\n", sum)
	for _, t := range ts {
		if !t.first.IsZero() {
			fmt.Fprintf(out, "%8.1f  wall time of the %q run, first event to last\n", t.last.Sub(t.first).Seconds(), labelOf(t))
		}
	}
	if top > len(tests) {
		top = len(tests)
	}
	fmt.Fprintf(out, "\nthe %d slowest tests (seconds):\n", top)
	for _, tt := range tests[:top] {
		fmt.Fprintf(out, "%8.1f  %s %s\n", tt.elapsed, trim(tt.pkg), tt.test)
	}
}

func labelOf(t *tally) string {
	if len(t.pkgs) > 0 {
		return t.pkgs[0].label
	}
	return ""
}

// trim drops the module path.
func trim(pkg string) string {
	return strings.TrimPrefix(pkg, "github.com/quorumlock/quorumlock/")
}
