package main

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/orders/watchdog"
)

// demoInvariantInterval is ORDERS_INVARIANT_INTERVAL of the demo's ordersd
// processes (the default is a minute): how often each one's watchdog checks
// the database and sets orders_invariant_violations.
const demoInvariantInterval = time.Second

// demoScrapeTimeout bounds the wait for every instance's /metrics to show
// what the operator's view prints.
const demoScrapeTimeout = 20 * time.Second

// demoStockKey is the stock lock of the demo's product (orders locks
// "stock:" + product id).
const demoStockKey = "stock:42"

// operatorView prints what an operator sees once the scenarios are done
// (they ended at ranUntil): the key metrics of every instance, scraped from
// its /metrics, then the output of quorumctl status, inspect and
// invariants, each run as its own process of the quorumctl binary with env,
// the environment the demo's ordersd processes run with.
func operatorView(ctx context.Context, procs []*ordersdProc, quorumctl string, env []string, ranUntil time.Time, out io.Writer) error {
	fmt.Fprintf(out, "\n=== the operator's view, after the run ===\n")
	// Each watchdog starts a round at least every demoInvariantInterval:
	// half an interval more, and one that began after the run has also
	// finished (a round takes milliseconds on loopback). The watchdog
	// exports no time of its last round to wait for instead.
	sets, err := scrapeFresh(ctx, procs, ranUntil.Add(demoInvariantInterval+demoInvariantInterval/2))
	if err != nil {
		return fmt.Errorf("operator's view: %w", err)
	}
	names := make([]string, len(procs))
	for i, p := range procs {
		names[i] = p.name
	}
	fmt.Fprintf(out, "\nmetrics, scraped from each instance's /metrics (all: the sum; for the gauge, the largest)\n")
	writeMetricTable(out, names, sets, operatorGroups(sets))

	for _, args := range [][]string{{"status"}, {"inspect", demoStockKey}, {"invariants"}} {
		if err := runQuorumctl(ctx, quorumctl, env, args, out); err != nil {
			return err
		}
	}
	return nil
}

// quorumctlTimeout bounds one quorumctl command of the operator's view.
const quorumctlTimeout = time.Minute

// runQuorumctl prints "$ quorumctl ARGS", then runs the quorumctl binary
// with args and the environment env (the last entry of a name wins, as
// os/exec passes it on), its standard input empty and its output, standard
// and error, written to out. A non-zero exit status is an error that names
// the command.
func runQuorumctl(ctx context.Context, quorumctl string, env, args []string, out io.Writer) error {
	line := strings.Join(args, " ")
	fmt.Fprintf(out, "\n$ quorumctl %s\n", line)
	ctx, cancel := context.WithTimeout(ctx, quorumctlTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, quorumctl, args...)
	cmd.Env = env
	// One writer for both: os/exec then lets one goroutine at a time write.
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("quorumctl %s: %w", line, err)
	}
	return nil
}

// scrapeFresh scrapes every instance's /metrics until each exports
// orders_invariant_violations for every check of the watchdog, and the
// clock has passed notBefore: the watchdog rounds every
// demoInvariantInterval, so by then a round has run on the state the
// scenarios left. It gives up after demoScrapeTimeout, naming what is
// missing.
func scrapeFresh(ctx context.Context, procs []*ordersdProc, notBefore time.Time) ([]metricSet, error) {
	deadline := time.Now().Add(demoScrapeTimeout)
	for {
		sets := make([]metricSet, len(procs))
		var missing []string
		for i, p := range procs {
			set, err := scrapeMetrics(ctx, p.url+"/metrics")
			if err != nil {
				missing = append(missing, fmt.Sprintf("%s: %v", p.name, err))
				continue
			}
			sets[i] = set
			for _, c := range watchdog.Checks() {
				if _, ok := set.sum(metricInvariantViolations, map[string]string{"check": c}); !ok {
					missing = append(missing, fmt.Sprintf("%s: no %s{check=%q}", p.name, metricInvariantViolations, c))
				}
			}
		}
		if len(missing) == 0 && !time.Now().Before(notBefore) {
			return sets, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("metrics not ready after %v: %s", demoScrapeTimeout, strings.Join(missing, "; "))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
