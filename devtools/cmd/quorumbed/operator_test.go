package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/orders/watchdog"
)

// scrapeFresh polls until every instance exports the gauge of every check,
// and not before the time it is given.
func TestScrapeFreshWaitsForTheWatchdog(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "# TYPE orders_place_total counter\norders_place_total{outcome=\"created\"} 1")
		if hits.Add(1) <= 3 {
			return // no watchdog round yet
		}
		fmt.Fprintln(w, "# TYPE orders_invariant_violations gauge")
		for _, c := range watchdog.Checks() {
			fmt.Fprintf(w, "orders_invariant_violations{check=%q} 0\n", c)
		}
	}))
	defer srv.Close()
	procs := []*ordersdProc{{name: "a", url: srv.URL}, {name: "b", url: srv.URL}}
	start := time.Now()
	sets, err := scrapeFresh(context.Background(), procs, start.Add(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("scrapeFresh returned after %v, before the time it was given", d)
	}
	for i, set := range sets {
		if _, ok := set.sum(metricInvariantViolations, map[string]string{"check": watchdog.CheckStuckPaying}); !ok {
			t.Errorf("scrape %d has no gauge", i)
		}
	}
	if n := hits.Load(); n < 5 {
		t.Errorf("%d scrapes, want polls until both instances export the gauge", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := scrapeFresh(ctx, procs, time.Now().Add(time.Hour)); err == nil {
		t.Error("scrapeFresh ignored a cancelled context")
	}
}

// runQuorumctl runs the binary as its own process: the header line, then
// its standard output and error; the environment as a process started
// with it sees it (the last entry of a name wins, a value may hold "=" or
// be empty); nothing on its standard input; a failure names the command.
func TestRunQuorumctl(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "quorumctl")
	script := `#!/bin/sh
echo "args: $*"
echo "A=$A B=$B EMPTY=[$EMPTY] MISSING=[${MISSING-unset}]"
echo "on stderr" >&2
if read -r line; then echo "stdin: $line"; fi
if [ "$1" = fail ]; then exit 3; fi
`
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"A=1", "B=x=y", "A=2", "EMPTY="}
	var out strings.Builder
	if err := runQuorumctl(context.Background(), bin, env, []string{"inspect", demoStockKey}, &out); err != nil {
		t.Fatalf("runQuorumctl: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"\n$ quorumctl inspect stock:42\nargs: inspect stock:42\n",
		"A=2 B=x=y EMPTY=[] MISSING=[unset]\n",
		"on stderr\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "stdin:") {
		t.Errorf("quorumctl read something on its standard input:\n%s", out.String())
	}

	out.Reset()
	err := runQuorumctl(context.Background(), bin, env, []string{"fail", "now"}, &out)
	if err == nil || !strings.Contains(err.Error(), "quorumctl fail now: exit status 3") {
		t.Errorf("a failing quorumctl gave %v, want an error naming the command and its exit status", err)
	}
	if !strings.Contains(out.String(), "$ quorumctl fail now\nargs: fail now\n") {
		t.Errorf("the output of a failing quorumctl is missing:\n%s", out.String())
	}
	if err := runQuorumctl(context.Background(), filepath.Join(t.TempDir(), "none"), env, []string{"status"}, &out); err == nil {
		t.Error("a missing binary ran")
	}
}
