package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/devtools/audit"
	"github.com/quorumlock/quorumlock/devtools/testbed"
)

// The HA demo on a bed (local processes: the Postgres HA group runs on
// them only), end to end: the primary killed in the middle of the second
// double-click, clients answered 503 with Retry-After and never left
// hanging, the standby promoted, /readyz naming it, the old primary back
// as a standby that refuses writes, one order per key, and the timings.
func TestDemoHAOnBed(t *testing.T) {
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build ordersd: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "ordersd")
	if out, err := exec.Command(gocmd, "build", "-o", bin, "github.com/quorumlock/quorumlock/cmd/ordersd").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/ordersd: %v\n%s", err, out)
	}
	t.Setenv(testbed.EnvProvider, testbed.ProviderLocal)
	ctx, cancel := context.WithTimeout(context.Background(), haDemoTimeout+time.Minute)
	defer cancel()
	var out strings.Builder
	start := time.Now()
	err = run(ctx, []string{"demo", "--ha", "-ordersd", bin}, os.Environ(), strings.NewReader(""), &out, &out)
	t.Logf("demo --ha took %v:\n%s", time.Since(start).Round(time.Millisecond), out.String())
	if err != nil {
		t.Fatalf("demo --ha: %v", err)
	}
	got := out.String()
	for _, want := range []*regexp.Regexp{
		// The order waited inside the primary when it was killed.
		regexp.MustCompile(`SIGKILL (pgha\d) \(its keeper, Postgres and every backend\), [1-9]\d* order transaction\(s\) waiting inside it`),
		// Clients saw 503s, each with a Retry-After, and no hang.
		regexp.MustCompile(`\d+ answers, [1-9]\d* of them 503, each with a Retry-After; the slowest took \S+: no request hung`),
		// The monitor promoted the standby.
		regexp.MustCompile(`(?m)^  \+\S+ +(pgha\d) \S+/wait_primary: Setting goal state`),
		// /readyz went from not ready to naming the new primary.
		regexp.MustCompile(`(?m)^  \+\S+ +503 not ready: Postgres does not answer;$`),
		regexp.MustCompile(`(?m)^  \+\S+ +200 ready / postgres primary: host \d of 2 in ORDERS_DATABASE_URL \(pgha\d at 127\.0\.0\.2:\d+\)$`),
		// The old primary came back as a standby that refuses writes.
		regexp.MustCompile(`(?m)^    (pgha\d) at \S+: secondary \(healthy\)$`),
		regexp.MustCompile(`\(SQLSTATE 25006\)`),
		// The timings.
		regexp.MustCompile(`the first 201 to a retried click +\d\S*s `),
	} {
		if !want.MatchString(got) {
			t.Errorf("the output lacks %q", want)
		}
	}
	// The killed node is the one that comes back as the secondary, and
	// the other is the one promoted.
	killed := regexp.MustCompile(`SIGKILL (pgha\d) `).FindStringSubmatch(got)
	promoted := regexp.MustCompile(`(?m)^  \+\S+ +(pgha\d) \S+/wait_primary: `).FindStringSubmatch(got)
	back := regexp.MustCompile(`(?m)^    (pgha\d) at \S+: secondary`).FindStringSubmatch(got)
	if killed == nil || promoted == nil || back == nil || killed[1] == promoted[1] || back[1] != killed[1] {
		t.Errorf("killed %q, promoted %q, back as the secondary %q: want the killed one back and the other promoted", killed, promoted, back)
	}
	if !strings.Contains(got, "audit: "+strings.Join(audit.Checks(), ", ")+" over 2 order rows and 6 answers: no violations\n") ||
		!strings.Contains(got, "orders in Postgres: 2, stock of product 42 left: 0\n") {
		t.Errorf("the audit does not show one order per key and the stock balanced")
	}
	if n := strings.Count(got, "replayed=false"); n != 2 {
		t.Errorf("%d answers placed an order (replayed=false), want 2: one per double-click", n)
	}
}
