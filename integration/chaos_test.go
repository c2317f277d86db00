package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/devtools/chaos"
	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
)

// TestChaosShort is the short chaos suite: the scenarios marked Short, on
// both locks (quorum and etcdlock), each run with the fence and without it
// on the same seed. The fenced runs must lose no update, accept no stale
// fence and be linearizable; the unfenced runs of the staged scenarios
// must lose updates (the checker has teeth); the restart guard must stop
// the staged double grant, and the clock jump must get past it. `make
// chaos` runs every scenario and writes docs/SAFETY.md. The semaphore's
// row judges its resource with the checker's model (no more holders inside
// than permits), and its unfenced run must let more in.
//
// Each row runs chaosRounds rounds (long_off_test.go: one) instead of the
// scenario's own: a staged scenario goes on past its rounds until one of
// them has staged the late write, so one round keeps the negative control
// biting; the full rows run in `make chaos`, each on 3 seeds. The etcd
// rows whose nemesis alternates between the leader and a follower keep two
// steps, one on each.
func TestChaosShort(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Redis: 5, Etcd: 3, Postgres: true, AppendFsync: testbed.FsyncEverySec, Clock: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	env, err := chaos.NewEnv(ctx, bed, chaos.Launcher{Path: os.Args[0], Args: []string{"-test.run=^$"}},
		chaos.EnvOptions{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	for _, sc := range chaos.Scenarios() {
		if !sc.Short || sc.NA != "" {
			continue
		}
		sc.Rounds = shortRounds(sc)
		t.Run(sc.ID(), func(t *testing.T) {
			var p chaos.Pair
			p.Scenario = sc
			for _, fenced := range []bool{true, false} {
				res, err := env.Run(ctx, sc, fenced, 20261201)
				if err != nil {
					t.Fatalf("fenced=%v: %v", fenced, err)
				}
				t.Logf("fenced=%v: %d faults, %d leases of %d attempts, %d writes accepted, %d rejected, %d errors; lost %d, stale accepted %d, "+
					"resource violations %d (at most %d holders inside), double grants %d, linearizable %s; notes: %s",
					fenced, res.Injected, res.Locks, res.Attempts, res.Accepted, res.Rejected, res.Errors,
					res.Lost, res.StaleAccepted, res.Broken, res.MaxHolders, res.Overlaps, res.Linearizable, strings.Join(res.Notes, "; "))
				if fenced {
					p.Fenced = res
				} else {
					p.Plain = res
				}
			}
			if v := chaos.Verdict(p); len(v) > 0 {
				t.Errorf("%s:\n  %s", sc.Name, strings.Join(v, "\n  "))
				for _, r := range []chaos.Result{p.Fenced, p.Plain} {
					if path, err := dumpHistory(sc.ID(), r); err == nil {
						t.Logf("history of the run (fenced=%v): %s", r.Fenced, path)
					}
				}
			}
		})
	}
}

// shortRounds is the number of rounds sc runs in this suite.
func shortRounds(sc chaos.Scenario) int {
	if chaosRounds == 0 {
		return sc.Rounds
	}
	n := chaosRounds
	if sc.Lock == chaos.LockEtcd && !sc.Staged {
		n = 2 // a nemesis step on the leader and one on a follower
	}
	return min(n, sc.Rounds)
}

// dumpHistory keeps a failed run's events where CI logs can point to them.
func dumpHistory(name string, r chaos.Result) (string, error) {
	f, err := os.CreateTemp("", fmt.Sprintf("quorumlock-chaos-%s-fenced-%v-*.jsonl", chaos.Anchor(name), r.Fenced))
	if err != nil {
		return "", err
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	for _, e := range r.History {
		if err := enc.Encode(e); err != nil {
			return "", err
		}
	}
	return f.Name(), nil
}
