package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/devtools/testbed"
)

// TestParseMulti: multi-K takes K keys per lease, its workers and key pool
// from -multi-workers and -multi-pool, and is refused with more keys per
// lease than the pool holds.
func TestParseMulti(t *testing.T) {
	sc, err := parseScenario("multi-3")
	if err != nil || sc.kind != kindMulti || sc.keys != 3 || sc.name != "multi-3" {
		t.Fatalf("parseScenario(multi-3) = %+v, %v", sc, err)
	}
	if sc, err := parseScenario("multi-64"); err != nil || sc.keys != maxKeyPool {
		t.Fatalf("parseScenario(multi-64) = %+v, %v", sc, err)
	}
	for _, name := range []string{"multi", "multi-", "multi-0", "multi-1", "multi-65", "multi-03", "multi-x", "multi-3-1", "multi-+3", "Multi-3"} {
		if _, err := parseScenario(name); err == nil || !strings.Contains(err.Error(), "multi-K") {
			t.Errorf("parseScenario(%q): %v, want an unknown-scenario error naming multi-K", name, err)
		}
	}
	c, err := parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.multiWorkers != 16 || c.multiPool != 8 || c.seed != 1 {
		t.Fatalf("defaults: %+v", c)
	}
	i := slices.IndexFunc(c.scenarios, func(sc scenario) bool { return sc.kind == kindMulti })
	if i < 0 || c.scenarios[i] != (scenario{name: "multi-3", kind: kindMulti, workers: 16, keys: 3, pool: 8}) {
		t.Fatalf("no multi-3 of 16 workers over 8 keys in the default scenarios: %+v", c.scenarios)
	}
	c, err = parse([]string{"-scenarios", "multi-2,multi-5", "-multi-workers", "4", "-multi-pool", "5", "-seed", "9"})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.scenarios) != 2 || c.scenarios[1] != (scenario{name: "multi-5", kind: kindMulti, workers: 4, keys: 5, pool: 5}) || c.seed != 9 {
		t.Fatalf("parsed: %+v", c)
	}
	for _, args := range [][]string{
		{"-multi-workers", "0"}, {"-multi-workers", "1025"}, {"-multi-pool", "1"}, {"-multi-pool", "65"},
		{"-scenarios", "multi-9"}, {"-scenarios", "multi-4", "-multi-pool", "3"}, {"-seed", "-1"}, {"-seed", "x"},
	} {
		if _, err := parse(args); err == nil {
			t.Errorf("parse(%q) accepted", args)
		}
	}
	multi := contender{multi: func(context.Context, []string) (held, error) { return nothingHeld{}, nil }}
	waits := contender{wait: func(context.Context, string) (held, error) { return nothingHeld{}, nil }}
	if sc := (scenario{kind: kindMulti}); !sc.contended() || sc.fault() || !sc.runs(multi) || sc.runs(waits) || sc.runs(contender{}) {
		t.Error("contended(), fault() or runs() is wrong for multi")
	}
	if kindMulti.String() != "multi" {
		t.Errorf("kindMulti is named %q", kindMulti)
	}
}

// TestPicker: a worker's picks are distinct keys of the pool, in an order
// that varies, the same for the same seed, round and worker and not for
// another.
func TestPicker(t *testing.T) {
	pool := keys("p", 8)
	draw := func(seed uint64, round, w int) [][]string {
		p := newPicker(pool, 3, seed, round, w)
		var out [][]string
		for range 200 {
			out = append(out, slices.Clone(p.next()))
		}
		return out
	}
	a := draw(1, 0, 0)
	eq := func(x, y [][]string) bool { return slices.EqualFunc(x, y, slices.Equal) }
	if !eq(a, draw(1, 0, 0)) || eq(a, draw(2, 0, 0)) || eq(a, draw(1, 1, 0)) || eq(a, draw(1, 0, 1)) {
		t.Fatal("the picks do not follow the seed, round and worker")
	}
	seen, unsorted := map[string]int{}, 0
	for _, ks := range a {
		if len(ks) != 3 || len(slices.Compact(slices.Sorted(slices.Values(ks)))) != 3 {
			t.Fatalf("pick %q: want 3 distinct keys", ks)
		}
		for _, k := range ks {
			if !slices.Contains(pool, k) {
				t.Fatalf("pick %q: %q is not in the pool", ks, k)
			}
			seen[k]++
		}
		if !slices.IsSorted(ks) {
			unsorted++
		}
	}
	// 600 keys over 8: about 75 each.
	for _, k := range pool {
		if seen[k] < 40 || seen[k] > 110 {
			t.Errorf("key %s picked %d times of 600", k, seen[k])
		}
	}
	if unsorted == 0 {
		t.Error("every pick came sorted: the order is not random")
	}
}

// fakeLocks records the acquisitions and releases of inOrder's one-key
// lock; it refuses the keys in fail.
type fakeLocks struct {
	mu   sync.Mutex
	log  []string
	fail map[string]error
}

type fakeHeld struct {
	f   *fakeLocks
	key string
	err error
}

func (h fakeHeld) Unlock(ctx context.Context) error {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	h.f.log = append(h.f.log, "unlock "+h.key)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return h.err
}

func (f *fakeLocks) wait(_ context.Context, key string) (held, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail[key]; err != nil {
		f.log = append(f.log, "refused "+key)
		return nil, err
	}
	f.log = append(f.log, "lock "+key)
	return fakeHeld{f: f, key: key, err: f.fail["unlock "+key]}, nil
}

// TestInOrder: several keys are taken in sorted order, each once, and
// released in reverse; a refused key releases what was taken, even once
// the caller's context has ended, and fails.
func TestInOrder(t *testing.T) {
	f := &fakeLocks{}
	multi := inOrder(f.wait, time.Second)
	h, err := multi(context.Background(), []string{"c", "a", "b", "a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{"lock a", "lock b", "lock c", "unlock c", "unlock b", "unlock a"}
	if !slices.Equal(f.log, want) {
		t.Fatalf("log %q, want %q", f.log, want)
	}

	refused := errors.New("held elsewhere")
	f = &fakeLocks{fail: map[string]error{"c": refused}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := inOrder(f.wait, time.Second)(ctx, []string{"d", "c", "b", "a"}); !errors.Is(err, refused) {
		t.Fatalf("got %v, want the refusal", err)
	}
	want = []string{"lock a", "lock b", "refused c", "unlock b", "unlock a"}
	if !slices.Equal(f.log, want) {
		t.Fatalf("log %q, want %q", f.log, want)
	}

	// A release that fails does not stop the others, and is reported.
	lost := errors.New("not confirmed")
	f = &fakeLocks{fail: map[string]error{"unlock b": lost}}
	h, err = inOrder(f.wait, time.Second)(context.Background(), []string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Unlock(context.Background()); !errors.Is(err, lost) || !slices.Contains(f.log, "unlock a") {
		t.Fatalf("unlock: %v, log %q", err, f.log)
	}
}

// TestRunMulti runs a tiny multi-3 scenario end to end on the bed lockbench
// starts: every contender that waits takes 3-key leases on overlapping key
// sets, with no error (generous TTL and node timeout, as in
// TestRunEndToEnd), and the table, the JSON and the plot hold it.
func TestRunMulti(t *testing.T) {
	if os.Getenv(testbed.EnvProvider) == "" {
		t.Setenv(testbed.EnvProvider, testbed.ProviderLocal)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	jsonPath, plotPath := filepath.Join(dir, "out.json"), filepath.Join(dir, "out.png")
	var out strings.Builder
	err := run(ctx, []string{"-rounds", "1", "-hot-duration", "500ms", "-scenarios", "multi-3", "-multi-workers", "4", "-multi-pool", "6",
		"-ttl", "20s", "-node-timeout", "2s", "-past-window=false", "-json", jsonPath, "-plot", plotPath, "-quiet"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	report := out.String()
	waiting := slices.DeleteFunc(slices.Clone(contenderNames), func(n string) bool { return n == nameFloor })
	rows := tableRows(t, report, "multi-3")
	for _, name := range waiting {
		// pairs/s, errors, vs redsync.
		if r, ok := rows[name]; !ok || len(r) != 13 || r[1] == "0" || r[9] != "0" || r[11] == "n/a" {
			t.Errorf("contender %s missing, idle or with errors: %q", name, r)
		}
	}
	if _, ok := rows[nameFloor]; ok || !strings.Contains(report, "4 workers, each lease 3 distinct keys picked at random (seed 1) out of 6") {
		t.Error("floor ran, or the subtitle is wrong")
	}
	if t.Failed() {
		t.Fatalf("report:\n%s", report)
	}
	checkMultiJSON(t, jsonPath, waiting)
	checkPNG(t, plotPath)
}

// checkMultiJSON checks the multi figures lockbench wrote to path.
func checkMultiJSON(t *testing.T, path string, want []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got runJSON
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("JSON: %v\n%s", err, b)
	}
	if len(got.Scenarios) != 1 || got.Config.Seed != 1 {
		t.Fatalf("JSON: %d scenarios, config %+v", len(got.Scenarios), got.Config)
	}
	sc := got.Scenarios[0]
	if sc.Kind != "multi" || sc.Workers != 4 || sc.KeysPerLease != 3 || sc.KeyPool != 6 || !slices.Equal(sc.Skipped, []string{nameFloor}) {
		t.Errorf("JSON: scenario %+v", sc)
	}
	var names []string
	for _, c := range sc.Contenders {
		names = append(names, c.Name)
		if c.Ops == 0 || c.Errors != 0 || c.MedianThroughput <= 0 || c.Pair.Count != c.Ops || c.Pair.P50ns <= 0 || c.Acquire.Count != c.Ops ||
			c.MinShare == nil || len(c.PerWorker) != 1 || len(c.PerWorker[0]) != 4 || c.VsRedsync == nil || c.VsQuorumlock == nil {
			t.Errorf("JSON: %s: %+v", c.Name, c)
		}
	}
	if !slices.Equal(names, want) {
		t.Errorf("JSON: contenders %q, want %q", names, want)
	}
}
