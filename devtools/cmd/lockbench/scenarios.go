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
	kindSolo      kind = iota // no contention, distinct keys
	kindHot                   // every worker contends for one key
	kindSlowNode              // no contention, the last node answers late
	kindNodeDown              // no contention, the last node is frozen
	kindMixed                 // one hot key and distinct keys, alone and together, from three instances
	kindMulti                 // leases of several keys at once, on overlapping key sets
	kindSemaphore             // workers share the permits of one semaphore
	kindRW                    // readers and writers on one read-write lock
	kindElection              // the time to a new leader after the leader dies
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
	case kindMixed:
		return "mixed"
	case kindMulti:
		return "multi"
	case kindSemaphore:
		return "semaphore"
	case kindRW:
		return "rw"
	case kindElection:
		return "election"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// scenario is one workload, run by every contender that can run it.
type scenario struct {
	name     string
	kind     kind
	workers  int           // mixed: hot waiters per instance
	distinct int           // mixed: distinct-key workers per instance
	hold     time.Duration // hot, mixed: how long each acquisition of the hot key is held
	keys     int           // multi: keys per lease
	pool     int           // multi: keys the leases pick theirs from (-multi-pool)
	permits  int           // semaphore: permits
	readPct  int           // rw: percentage of the operations that read
}

// primitive reports whether the scenario runs a primitive beyond the
// mutex (a semaphore, a read-write lock, an election): it has contenders of
// its own (see primitives.go), not the lock contenders.
func (s scenario) primitive() bool {
	return s.kind == kindSemaphore || s.kind == kindRW || s.kind == kindElection
}

// fault reports whether the scenario injects a fault into the bed.
func (s scenario) fault() bool { return s.kind == kindSlowNode || s.kind == kindNodeDown }

// contended reports whether workers of the scenario wait for a held key.
func (s scenario) contended() bool {
	return s.kind == kindHot || s.kind == kindMixed || s.kind == kindMulti
}

// runs reports whether contender c can run scenario s: the hot and mixed
// scenarios need a contender that waits for a held key, multi one that
// waits for several.
func (s scenario) runs(c contender) bool {
	switch {
	case s.kind == kindMulti:
		return c.multi != nil
	case s.contended():
		return c.wait != nil
	}
	return true
}

// defaultScenarios is the -scenarios default, in the order they run.
var defaultScenarios = []string{
	"solo-1", "solo-16",
	"hot-16-0ms", "hot-16-1ms", "hot-64-0ms", "hot-64-1ms",
	"multi-3",
	"slow-node", "node-down",
	"mixed-100-22-1ms",
	"semaphore-8", "rw-90-10", "election",
}

// maxWorkers bounds N in solo-N and hot-N-Hms, W and D in mixed-W-D-Hms,
// and -multi-workers.
const maxWorkers = 1024

// maxKeyPool bounds -multi-pool, and K in multi-K (which must not exceed
// -multi-pool either).
const maxKeyPool = 64

// parseScenario reads one -scenarios name: solo-N, hot-N-Hms,
// mixed-W-D-Hms, multi-K, slow-node, node-down, semaphore-P[-W], rw-R-W
// or election. A multi scenario's workers and key pool come from flags:
// parse sets them.
func parseScenario(name string) (scenario, error) {
	want := fmt.Errorf("unknown scenario %q: want solo-N, hot-N-Hms, mixed-W-D-Hms (N, W, D 1..%d, H 0..1000), multi-K (K 2..%d), slow-node, node-down, "+
		"semaphore-P or semaphore-P-W (P 1..%d permits, W 1..%d workers, default %d), rw-R-W (R%% reads, W%% writes, R+W = 100) or election",
		name, maxWorkers, maxKeyPool, maxPermits, maxWorkers, semaphoreWorkers)
	if sc, ok, isPrim := parsePrimitive(name); isPrim {
		if !ok {
			return scenario{}, want
		}
		return sc, nil
	}
	switch {
	case name == "slow-node":
		return scenario{name: name, kind: kindSlowNode, workers: 1}, nil
	case name == "node-down":
		return scenario{name: name, kind: kindNodeDown, workers: 1}, nil
	case strings.HasPrefix(name, "solo-"):
		n, ok := parseWorkers(strings.TrimPrefix(name, "solo-"))
		if !ok {
			return scenario{}, want
		}
		return scenario{name: name, kind: kindSolo, workers: n}, nil
	case strings.HasPrefix(name, "hot-"):
		ns, hs, found := strings.Cut(strings.TrimPrefix(name, "hot-"), "-")
		n, ok := parseWorkers(ns)
		h, okH := holdMS(hs)
		if !found || !ok || !okH {
			return scenario{}, want
		}
		return scenario{name: name, kind: kindHot, workers: n, hold: h}, nil
	case strings.HasPrefix(name, "mixed-"):
		parts := strings.Split(strings.TrimPrefix(name, "mixed-"), "-")
		if len(parts) != 3 {
			return scenario{}, want
		}
		w, okW := parseWorkers(parts[0])
		d, okD := parseWorkers(parts[1])
		h, okH := holdMS(parts[2])
		if !okW || !okD || !okH {
			return scenario{}, want
		}
		return scenario{name: name, kind: kindMixed, workers: w, distinct: d, hold: h}, nil
	case strings.HasPrefix(name, "multi-"):
		ks := strings.TrimPrefix(name, "multi-")
		k, ok := parseWorkers(ks)
		if !ok || k < 2 || k > maxKeyPool {
			return scenario{}, want
		}
		return scenario{name: name, kind: kindMulti, keys: k}, nil
	}
	return scenario{}, want
}

// parseWorkers reads a worker count of a scenario name: a decimal 1..maxWorkers
// with no sign or leading zero.
func parseWorkers(s string) (int, bool) {
	n, err := strconv.Atoi(s)
	return n, err == nil && n >= 1 && n <= maxWorkers && strconv.Itoa(n) == s
}

// holdMS reads the hold of a scenario name: "Hms" with H a decimal
// 0..1000 with no sign or leading zero.
func holdMS(s string) (time.Duration, bool) {
	hs, isMS := strings.CutSuffix(s, "ms")
	h, err := strconv.Atoi(hs)
	if !isMS || err != nil || h < 0 || h > 1000 || strconv.Itoa(h) != hs {
		return 0, false
	}
	return time.Duration(h) * time.Millisecond, true
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
	tallies   []*tally      // one per contender that ran, in contender order
	baselines []*tally      // fault scenarios: the same contenders without the fault
	mixed     []*mixedTally // mixed scenarios: one per contender that ran, like tallies
	skipped   []string      // contenders that cannot run the scenario
	// etcdFaultNode is the etcd member a fault scenario hits ("" when
	// etcd did not run).
	etcdFaultNode string
	// The primitive scenarios' figures, one per contender that ran (see
	// primitives.go): semaphore, rw and election.
	sem   []*semTally
	rw    []*rwTally
	elect []*electTally
}

// keys returns n distinct keys for one measured run.
func keys(prefix string, n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = prefix + ":" + strconv.Itoa(i)
	}
	return ks
}
