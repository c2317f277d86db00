package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// kind is the family of a scenario.
type kind int

const (
	kindSolo     kind = iota // no contention, distinct keys
	kindHot                  // every worker contends for one key
	kindSlowNode             // no contention, the last node answers late
	kindNodeDown             // no contention, the last node is frozen
)

// String names the kind as the JSON output does.
func (k kind) String() string {
	switch k {
	case kindSolo:
		return "solo"
	case kindHot:
		return "hot"
	case kindSlowNode:
		return "slow-node"
	case kindNodeDown:
		return "node-down"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// scenario is one workload, run by every contender that can run it.
type scenario struct {
	name    string
	kind    kind
	workers int
	hold    time.Duration // hot: how long each acquisition is held
}

// fault reports whether the scenario injects a fault into the bed.
func (s scenario) fault() bool { return s.kind == kindSlowNode || s.kind == kindNodeDown }

// runs reports whether contender c can run scenario s: the hot scenarios
// need a contender that waits for a held key.
func (s scenario) runs(c contender) bool { return s.kind != kindHot || c.wait != nil }

// defaultScenarios is the -scenarios default, in the order they run.
var defaultScenarios = []string{
	"solo-1", "solo-16",
	"hot-16-0ms", "hot-16-1ms", "hot-64-0ms", "hot-64-1ms",
	"slow-node", "node-down",
}

// maxWorkers bounds N in solo-N and hot-N-Hms.
const maxWorkers = 1024

// parseScenario reads one -scenarios name: solo-N, hot-N-Hms, slow-node
// or node-down.
func parseScenario(name string) (scenario, error) {
	want := fmt.Errorf("unknown scenario %q: want solo-N, hot-N-Hms (N 1..%d, H 0..1000), slow-node or node-down", name, maxWorkers)
	workers := func(s string) (int, bool) {
		n, err := strconv.Atoi(s)
		return n, err == nil && n >= 1 && n <= maxWorkers && strconv.Itoa(n) == s
	}
	switch {
	case name == "slow-node":
		return scenario{name: name, kind: kindSlowNode, workers: 1}, nil
	case name == "node-down":
		return scenario{name: name, kind: kindNodeDown, workers: 1}, nil
	case strings.HasPrefix(name, "solo-"):
		n, ok := workers(strings.TrimPrefix(name, "solo-"))
		if !ok {
			return scenario{}, want
		}
		return scenario{name: name, kind: kindSolo, workers: n}, nil
	case strings.HasPrefix(name, "hot-"):
		ns, hs, found := strings.Cut(strings.TrimPrefix(name, "hot-"), "-")
		n, ok := workers(ns)
		hs, isMS := strings.CutSuffix(hs, "ms")
		h, err := strconv.Atoi(hs)
		if !found || !ok || !isMS || err != nil || h < 0 || h > 1000 || strconv.Itoa(h) != hs {
			return scenario{}, want
		}
		return scenario{name: name, kind: kindHot, workers: n, hold: time.Duration(h) * time.Millisecond}, nil
	}
	return scenario{}, want
}

// tally is one contender's samples over the rounds of one scenario (or of
// the fault-free baseline of a fault scenario).
type tally struct {
	name       string
	throughput []float64 // successful pairs per second, one per round
	acquire    []time.Duration
	pair       []time.Duration
	ok, errors int
	firstErr   error
	mallocs    uint64
	shares     []float64 // hot: minShare of each round
	perWorker  [][]int   // hot: acquisitions per worker, one row per round
}

// add folds one round's sample into t.
func (t *tally) add(s sample, hot bool) {
	t.throughput = append(t.throughput, s.throughput())
	t.acquire = append(t.acquire, s.acquire...)
	t.pair = append(t.pair, s.pair...)
	t.ok += s.ok
	t.errors += s.errors
	t.mallocs += s.mallocs
	if t.firstErr == nil {
		t.firstErr = s.firstErr
	}
	if hot {
		t.shares = append(t.shares, minShare(s.perWorker))
		t.perWorker = append(t.perWorker, s.perWorker)
	}
}

// scenarioRun is what every contender did in one scenario.
type scenarioRun struct {
	sc        scenario
	tallies   []*tally // one per contender that ran, in contender order
	baselines []*tally // fault scenarios: the same contenders without the fault
	skipped   []string // contenders that cannot run the scenario
}

// keys returns n distinct keys for one measured run.
func keys(prefix string, n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = prefix + ":" + strconv.Itoa(i)
	}
	return ks
}
