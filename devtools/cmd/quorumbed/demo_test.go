package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/devtools/audit"
	"github.com/quorumlock/quorumlock/orders/watchdog"
)

// The demo on a bed, end to end: it ends with the operator's view, whose
// values are the run's: one order created in all, the stock lock taken and
// free again, no fence rejected, no invariant broken.
func TestDemoOnBed(t *testing.T) {
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build ordersd and quorumctl: %v", err)
	}
	dir := t.TempDir()
	bins := map[string]string{}
	for _, name := range []string{"ordersd", "quorumctl", "shipper"} {
		bins[name] = filepath.Join(dir, name)
		if out, err := exec.Command(gocmd, "build", "-o", bins[name], "github.com/quorumlock/quorumlock/cmd/"+name).CombinedOutput(); err != nil {
			t.Fatalf("go build ./cmd/%s: %v\n%s", name, err, out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var out strings.Builder
	start := time.Now()
	err = run(ctx, []string{"demo", "-ordersd", bins["ordersd"], "-quorumctl", bins["quorumctl"], "-shipper", bins["shipper"]}, os.Environ(), strings.NewReader(""), &out, &out)
	t.Logf("demo took %v", time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	// The audit says what it checked, over what.
	if !strings.Contains(out.String(), "audit: "+strings.Join(audit.Checks(), ", ")+" over 1 order row and 3 answers: no violations\n") {
		t.Errorf("the audit line does not name its checks and what they covered:\n%s", out.String())
	}
	// The cart bought twice at once: one sold whole, one refused naming
	// both lines, nothing left, nothing sold in part.
	if !cartShown(out.String()) {
		t.Errorf("the cart part does not show one cart sold and one refused:\n%s", out.String())
	}
	// The paid order's event, delivered twice, made one shipment.
	ship := regexp.MustCompile(`(?s)shipments for the order: (\d+)\n.*the same event added again as entry.*events_consumed_total\{result="duplicate"\} (\d+).*\n  shipments for the order: (\d+)\n`).FindStringSubmatch(out.String())
	if ship == nil || ship[1] != "1" || ship[2] == "0" || ship[3] != "1" {
		t.Errorf("the shipping part does not show one shipment before and after a duplicate delivery: %q\n%s", ship, out.String())
	}
	const head = "=== the operator's view, after the run ==="
	_, view, ok := strings.Cut(out.String(), head)
	if !ok {
		t.Fatalf("the demo printed no operator's view:\n%s", out.String())
	}
	t.Logf("%s%s", head, view)

	// row returns the per-instance values and the total of the row label
	// in the group whose title starts with group.
	row := func(group, label string) ([]int, int) {
		t.Helper()
		_, rest, ok := strings.Cut(view, "\n  "+group)
		if !ok {
			t.Fatalf("no group %q in the operator's view", group)
		}
		// The group ends at the next title, indented by two spaces, not four.
		if loc := regexp.MustCompile(`\n  \S`).FindStringIndex(rest); loc != nil {
			rest = rest[:loc[0]]
		}
		m := regexp.MustCompile(`(?m)^ {4}` + regexp.QuoteMeta(label) + `\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)$`).FindStringSubmatch(rest)
		if m == nil {
			t.Fatalf("no row %s under %q in:\n%s", label, group, view)
		}
		var vals []int
		for _, s := range m[1:] {
			n, err := strconv.Atoi(s)
			if err != nil {
				t.Fatalf("row %s under %q: %q is not a count", label, group, s)
			}
			vals = append(vals, n)
		}
		return vals[:3], vals[3]
	}
	wantTotal := func(group, label string, want int) {
		t.Helper()
		per, total := row(group, label)
		if sum := per[0] + per[1] + per[2]; total != want || sum != want {
			t.Errorf("%s %s: instances %v, all %d; want %d in all", group, label, per, total, want)
		}
	}
	// Every answer is counted where a reader of orders_place_total looks
	// for it: two orders created, one cart out of stock, two replays, one
	// refused key.
	wantTotal("POST /orders answers", `outcome="created"`, 2)      // the seed's order and one cart
	wantTotal("POST /orders answers", `outcome="out_of_stock"`, 1) // the other cart
	wantTotal("POST /orders answers", `outcome="replayed"`, 2)
	wantTotal("POST /orders answers", `outcome="fingerprint_mismatch"`, 1)
	wantTotal("fence rejections", `outcome="stale_fence"`, 0)
	wantTotal("idempotency claims", `outcome="CREATED"`, 3)
	wantTotal("fallbacks to Postgres", `mode="db"`, 0)
	wantTotal("leases lost", "all reasons", 0)
	wantTotal("failed watchdog rounds", "all rounds", 0)
	if _, n := row("stock lock acquisitions", `result="acquired"`); n < 1 {
		t.Errorf("the stock lock was acquired %d times, want at least once", n)
	}
	for _, c := range watchdog.Checks() {
		if per, max := row("invariant violations", fmt.Sprintf("check=%q", c)); max != 0 || per[0] != 0 || per[1] != 0 || per[2] != 0 {
			t.Errorf("invariant %s: %v rows on the instances, want 0 on each", c, per)
		}
	}
	if !regexp.MustCompile(`(?m)^ {4}result="acquired"\s+(\S+\s+){3}[0-9.]+(µs|ms|s)$`).MatchString(view) {
		t.Errorf("no mean lock wait of the acquisitions in:\n%s", view)
	}
	for _, want := range []string{
		"$ quorumctl status\n",
		"quorum: 5 of 5 reachable, 5 may vote, 3 needed: the lock can be taken",
		"database: postgres://",
		"$ quorumctl inspect stock:42\n",
		`key "stock:42"`,
		"not held: no token is on a majority of the 5 masters (3 needed)",
		"$ quorumctl invariants\ninvariants: none broken\n",
	} {
		if !strings.Contains(view, want) {
			t.Errorf("the operator's view lacks %q:\n%s", want, view)
		}
	}
	if n := regexp.MustCompile(`(?m)^127\.0\.0\.1:\d+\s+absent\s+-$`).FindAllString(view, -1); len(n) != 5 {
		t.Errorf("inspect shows stock:42 absent on %d masters, want 5:\n%s", len(n), view)
	}
}

// cartShown reports whether a demo's output shows the cart bought twice at
// once sold to one user and refused to the other, naming both short lines,
// whichever user won, with nothing left and nothing sold in part.
func cartShown(out string) bool {
	sold := regexp.MustCompile(`(?m)^  (u200[12]) <- 201 `).FindStringSubmatch(out)
	refused := regexp.MustCompile(`(?m)^  (u200[12]) <- 409 .*"shortItems":\[\{"productId":"7","quantity":1,"available":0\},\{"productId":"9","quantity":1,"available":0\}\]`).FindStringSubmatch(out)
	return sold != nil && refused != nil && sold[1] != refused[1] &&
		strings.Contains(out, "cart orders in Postgres: 1, stock left: 7=0 9=0\naudit: ")
}

// The cart part is judged the same whichever of the two users won the
// race, and a run that sold both carts or refused both is not accepted.
func TestCartShownEitherWinner(t *testing.T) {
	const short = `{"type":"out-of-stock","shortItems":[{"productId":"7","quantity":1,"available":0},{"productId":"9","quantity":1,"available":0}]}`
	const tail = "cart orders in Postgres: 1, stock left: 7=0 9=0\naudit: no violations\n"
	for _, c := range []struct {
		name string
		out  string
		want bool
	}{
		{"first user wins", "  u2001 <- 201 {}\n  u2002 <- 409 " + short + "\n" + tail, true},
		{"second user wins", "  u2001 <- 409 " + short + "\n  u2002 <- 201 {}\n" + tail, true},
		{"both sold", "  u2001 <- 201 {}\n  u2002 <- 201 {}\n" + tail, false},
		{"both refused", "  u2001 <- 409 " + short + "\n  u2002 <- 409 " + short + "\n" + tail, false},
		{"stock left", "  u2001 <- 201 {}\n  u2002 <- 409 " + short + "\ncart orders in Postgres: 1, stock left: 7=1 9=0\naudit: ", false},
	} {
		if got := cartShown(c.out); got != c.want {
			t.Errorf("%s: cartShown = %v, want %v", c.name, got, c.want)
		}
	}
}
