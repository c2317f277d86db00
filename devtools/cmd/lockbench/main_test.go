package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/internal/benchkit"
	"github.com/quorumlock/quorumlock/quorum"
)

func TestParseRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-rounds", "0"}, {"-rounds", "101"}, {"-ops", "0"}, {"-nodes", "0"}, {"-nodes", "16"},
		{"-ttl", "1ms"}, {"-bogus"}, {"-workers", "8"}, {"extra"},
		{"-node-timeout", "-1s"},
		{"-addrs", "127.0.0.1:1,,127.0.0.1:2"},
		{"-only", "quorumlock,nope"},
		{"-scenarios", "solo-0"}, {"-scenarios", "solo-1025"}, {"-scenarios", "solo-x"}, {"-scenarios", "solo-01"},
		{"-scenarios", "hot-16"}, {"-scenarios", "hot-16-1s"}, {"-scenarios", "hot-16-1001ms"}, {"-scenarios", "hot-0-1ms"},
		{"-scenarios", "bogus"}, {"-scenarios", ""}, {"-scenarios", "solo-1,solo-1"},
		{"-hot-duration", "1ms"}, {"-op-timeout", "0"}, {"-fault-budget", "1ms"},
		{"-slow-latency", "0"}, {"-slow-latency", "2s"},
		{"-plot", "out.svg"},
		// etcd's shortest lease is 2s; -etcd-addrs goes with -addrs, and
		// -only etcd with -addrs needs it.
		{"-etcd-ttl", "1500ms"}, {"-etcd-ttl", "2h"}, {"-etcd-addrs", "127.0.0.1:1"},
		{"-addrs", "127.0.0.1:1", "-only", "etcd"}, {"-addrs", "127.0.0.1:1", "-etcd-addrs", "127.0.0.1:2,"},
		// A fault scenario needs a majority that survives the faulty node.
		{"-nodes", "2"}, {"-nodes", "1", "-scenarios", "node-down"},
	} {
		if _, err := parse(args); err == nil {
			t.Errorf("parse(%q) accepted", args)
		}
	}
	c, err := parse([]string{"-addrs", "127.0.0.1:1,127.0.0.1:2", "-only", "redsync"})
	if err != nil || len(c.addrs) != 2 || len(c.only) != 1 {
		t.Fatalf("parse: %+v %v", c, err)
	}
	// Given Redis masters and no etcd members: every contender but etcd,
	// with a note.
	c, err = parse([]string{"-addrs", "127.0.0.1:1"})
	if err != nil || c.wants(nameEtcd) || !c.wants(nameQuorum) || len(c.only) != len(contenderNames)+len(primitiveOnlyNames)-1 || len(c.notes) != 1 {
		t.Fatalf("-addrs without -etcd-addrs: %+v %v", c, err)
	}
	c, err = parse([]string{"-addrs", "127.0.0.1:1", "-etcd-addrs", "127.0.0.1:2,127.0.0.1:3,127.0.0.1:4"})
	if err != nil || !c.wants(nameEtcd) || len(c.etcdAddrs) != 3 || len(c.notes) != 0 {
		t.Fatalf("-etcd-addrs: %+v %v", c, err)
	}
	if c, err := parse([]string{"-ttl", "1s", "-etcd-ttl", "2500ms"}); err != nil || c.ttl != time.Second || etcdTTL(c.etcdTTL) != 3*time.Second {
		t.Fatalf("-ttl below etcd's minimum, -etcd-ttl: %+v %v", c, err)
	}
	c, err = parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.only, slices.Concat(contenderNames, primitiveOnlyNames)) || !c.wants(nameEtcd) {
		t.Fatalf("default contenders %q", c.only)
	}
	var names []string
	for _, sc := range c.scenarios {
		names = append(names, sc.name)
	}
	if !slices.Equal(names, defaultScenarios) {
		t.Fatalf("default scenarios %q, want %q", names, defaultScenarios)
	}
	if _, err := parse([]string{"-nodes", "1", "-scenarios", "solo-1,hot-2-0ms"}); err != nil {
		t.Fatalf("one node without fault scenarios: %v", err)
	}
}

func TestParseScenario(t *testing.T) {
	for _, tc := range []struct {
		name     string
		kind     kind
		workers  int
		distinct int
		hold     time.Duration
	}{
		{"solo-1", kindSolo, 1, 0, 0},
		{"solo-16", kindSolo, 16, 0, 0},
		{"hot-16-0ms", kindHot, 16, 0, 0},
		{"hot-64-1ms", kindHot, 64, 0, time.Millisecond},
		{"hot-2-250ms", kindHot, 2, 0, 250 * time.Millisecond},
		{"slow-node", kindSlowNode, 1, 0, 0},
		{"node-down", kindNodeDown, 1, 0, 0},
		{"mixed-100-22-1ms", kindMixed, 100, 22, time.Millisecond},
		{"mixed-1-1024-0ms", kindMixed, 1, 1024, 0},
		{"mixed-1024-1-1000ms", kindMixed, 1024, 1, time.Second},
	} {
		sc, err := parseScenario(tc.name)
		if err != nil || sc.name != tc.name || sc.kind != tc.kind || sc.workers != tc.workers || sc.distinct != tc.distinct || sc.hold != tc.hold {
			t.Errorf("parseScenario(%q) = %+v, %v", tc.name, sc, err)
		}
	}
	for _, name := range []string{
		"mixed", "mixed-", "mixed-1-1", "mixed-1-1ms", "mixed-1-1-1ms-1", "mixed-1-1-1ms-",
		"mixed-0-1-1ms", "mixed-1-0-1ms", "mixed-1025-1-1ms", "mixed-1-1025-1ms", "mixed-1-1-1001ms",
		"mixed-1-1-1s", "mixed-1-1-1", "mixed-1-1-ms", "mixed-1-1--1ms", "mixed-01-1-1ms", "mixed-1-01-1ms",
		"mixed-1-1-01ms", "mixed-+1-1-1ms", "mixed-x-1-1ms", "mixed-1-x-1ms", "mixed-1--1-1ms", "Mixed-1-1-1ms",
	} {
		if _, err := parseScenario(name); err == nil || !strings.Contains(err.Error(), "unknown scenario") || !strings.Contains(err.Error(), "mixed-W-D-Hms") {
			t.Errorf("parseScenario(%q): %v, want an unknown-scenario error", name, err)
		}
	}
	if !(scenario{kind: kindNodeDown}).fault() || (scenario{kind: kindHot}).fault() || (scenario{kind: kindMixed}).fault() {
		t.Error("fault() is wrong")
	}
	waits := contender{wait: func(context.Context, string) (held, error) { return nothingHeld{}, nil }}
	if !(scenario{kind: kindHot}).runs(waits) || (scenario{kind: kindHot}).runs(contender{}) || !(scenario{kind: kindSolo}).runs(contender{}) ||
		!(scenario{kind: kindMixed}).runs(waits) || (scenario{kind: kindMixed}).runs(contender{}) {
		t.Error("runs() is wrong")
	}
	if kindMixed.String() != "mixed" || defaultScenarios[len(defaultScenarios)-4] != "mixed-100-22-1ms" {
		t.Error("mixed is not named mixed, or not the last lock scenario of the defaults")
	}
}

// TestMixedFigures checks the ratios of a mixed tally: per round, over the
// rounds whose alone rate was above 0, summarised by their median.
func TestMixedFigures(t *testing.T) {
	mt := &mixedTally{hotAlone: &tally{}, hotMix: &tally{}, distinctAlone: &tally{}, distinctMix: &tally{}}
	rate := func(ok int) sample { return sample{ok: ok, elapsed: time.Second} }
	mt.addRound(rate(100), rate(1000), rate(50), rate(900))
	mt.addRound(rate(100), rate(0), rate(10), rate(500))
	mt.addRound(rate(100), rate(1000), rate(30), rate(700))
	m := mixedFigures(mt)
	if !slices.Equal(m.HotMixedVsAlonePerRound, []float64{0.5, 0.1, 0.3}) || m.HotMixedVsAlone == nil || *m.HotMixedVsAlone != 0.3 {
		t.Errorf("hot ratios %v, median %v", m.HotMixedVsAlonePerRound, m.HotMixedVsAlone)
	}
	if !slices.Equal(m.DistinctMixedVsAlonePerRound, []float64{0.9, 0.7}) || m.DistinctMixedVsAlone == nil || *m.DistinctMixedVsAlone != 0.8 {
		t.Errorf("distinct ratios %v, median %v", m.DistinctMixedVsAlonePerRound, m.DistinctMixedVsAlone)
	}
	if m.HotMixed.MedianPerSecond != 30 || m.DistinctAlone.MedianPerSecond != 1000 || m.HotMixed.MinShare == nil || m.DistinctMixed.MinShare != nil {
		t.Errorf("figures %+v", m)
	}
	cs := []contenderJSON{{Name: nameQuorum, Mixed: m}, {Name: nameRedsync, Mixed: mixedFigures(mt)}}
	mixedVsRedsync(cs)
	if cs[0].Mixed.HotMixedVsRedsync == nil || *cs[0].Mixed.HotMixedVsRedsync != 1 || cs[0].Mixed.DistinctMixedVsRedsync == nil {
		t.Errorf("vs redsync: %+v", cs[0].Mixed)
	}
	empty := mixedFigures(&mixedTally{hotAlone: &tally{}, hotMix: &tally{}, distinctAlone: &tally{}, distinctMix: &tally{}})
	if empty.HotMixedVsAlone != nil || empty.HotMixedVsAlonePerRound == nil || empty.DistinctMixedVsAlone != nil {
		t.Errorf("no rounds: %+v", empty)
	}
}

func ms(n ...int) []time.Duration {
	ds := make([]time.Duration, len(n))
	for i, x := range n {
		ds[i] = time.Duration(x) * time.Millisecond
	}
	return ds
}

func TestPercentile(t *testing.T) {
	if got := benchkit.Percentile(nil, 0.5); got != 0 {
		t.Fatalf("empty: %v", got)
	}
	one := ms(7)
	for _, p := range []float64{0, 0.5, 0.999, 1} {
		if got := benchkit.Percentile(one, p); got != 7*time.Millisecond {
			t.Fatalf("one sample, p%v: %v", p, got)
		}
	}
	// 1..1000 ms, shuffled: nearest rank gives exactly the p*n-th value.
	var ds []time.Duration
	for i := 1000; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	orig := slices.Clone(ds)
	for p, want := range map[float64]time.Duration{0: 1, 0.5: 500, 0.99: 990, 0.999: 999, 1: 1000} {
		if got := benchkit.Percentile(ds, p); got != want*time.Millisecond {
			t.Errorf("p%v = %v, want %vms", p, got, int64(want))
		}
	}
	if !slices.Equal(ds, orig) {
		t.Fatal("percentile modified its input")
	}
	// Ten samples: p99 and p99.9 are the largest, p50 the fifth.
	ten := ms(10, 9, 8, 7, 6, 5, 4, 3, 2, 1)
	s := benchkit.Summarize(ten)
	if s.Count != 10 || s.P50ns != int64(5*time.Millisecond) || s.P99ns != int64(10*time.Millisecond) ||
		s.P999ns != int64(10*time.Millisecond) || s.MaxNs != int64(10*time.Millisecond) {
		t.Fatalf("summarize: %+v", s)
	}
	if (benchkit.Summarize(nil) != benchkit.LatencyStats{}) {
		t.Fatal("benchkit.Summarize(nil) not zero")
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{
		{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5},
	} {
		in := slices.Clone(tc.xs)
		if got := benchkit.Median(tc.xs); got != tc.want {
			t.Errorf("benchkit.Median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
		if !slices.Equal(in, tc.xs) {
			t.Errorf("median modified %v", in)
		}
	}
}

func TestMinShare(t *testing.T) {
	for _, tc := range []struct {
		counts []int
		want   float64
	}{
		{nil, 0}, {[]int{0, 0}, 0}, {[]int{5}, 1}, {[]int{10, 10, 10}, 1},
		{[]int{0, 10}, 0}, {[]int{5, 15}, 0.5}, {[]int{2, 4, 6}, 0.5},
	} {
		if got := minShare(tc.counts); got != tc.want {
			t.Errorf("minShare(%v) = %v, want %v", tc.counts, got, tc.want)
		}
	}
	if benchkit.Ratio(1, 0) != 0 || benchkit.Ratio(3, 2) != 1.5 {
		t.Fatal("ratio")
	}
}

// TestPlotEdgeCases draws panels a log axis could choke on: one where
// nothing succeeded, one where every sample is the same.
func TestPlotEdgeCases(t *testing.T) {
	s := runJSON{Scenarios: []scenarioJSON{
		{Name: "node-down", Kind: kindNodeDown.String(), raw: []*scenarioCurve{{name: nameFloor}}},
		{Name: "solo-1", Kind: kindSolo.String(), raw: []*scenarioCurve{{name: nameQuorum, fault: ms(1, 1, 1)}}},
		{Name: "hot-2-0ms", Kind: kindHot.String(), raw: []*scenarioCurve{{name: nameRedsync, fault: []time.Duration{1}}}},
		{Name: "mixed-2-1-0ms", Kind: kindMixed.String(),
			raw:         []*scenarioCurve{{name: nameQuorum, fault: ms(5, 9), baseline: ms(1, 2), baseLabel: " (alone)"}},
			rawDistinct: []*scenarioCurve{{name: nameQuorum, baseLabel: " (alone)"}}},
	}}
	path := filepath.Join(t.TempDir(), "p.png")
	if err := writePlot(path, s); err != nil {
		t.Fatal(err)
	}
	checkPNG(t, path)
	xys := cdf(ms(3, 1, 2))
	if len(xys) != 3 || xys[0].X != 1 || xys[2].X != 3 || xys[2].Y != 1 {
		t.Fatalf("cdf: %v", xys)
	}
	var many []time.Duration
	for i := range 5000 {
		many = append(many, time.Duration(i+1)*time.Microsecond)
	}
	xys = cdf(many)
	if len(xys) != cdfPoints || xys[len(xys)-1].X != 5 || xys[len(xys)-1].Y != 1 {
		t.Fatalf("cdf of many: %d points, last %v", len(xys), xys[len(xys)-1])
	}
}

func checkPNG(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) || len(b) < 1000 {
		t.Fatalf("%s is not a PNG (%d bytes)", path, len(b))
	}
}

// TestSingleNodeScript runs the baseline's compare-and-delete script on its
// own against a real server: it deletes only the caller's token.
func TestSingleNodeScript(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Redis: 1})
	c := bedtest.RedisClients(t, bed)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := newSingleNode(c, time.Minute)
	if err := s.pair(ctx, "k"); err != nil {
		t.Fatalf("lock+unlock: %v", err)
	}
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("key left after unlock: %d %v", n, err)
	}
	if err := c.Set(ctx, "k", "someone-else", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.pair(ctx, "k"); !errors.Is(err, errHeld) {
		t.Fatalf("held key: got %v, want errHeld", err)
	}
	// The waiting lock gives up within its bound while the key stays held.
	if _, err := s.lock(ctx, "k", 50*time.Millisecond); !errors.Is(err, errHeld) {
		t.Fatalf("waiting lock on a held key: got %v, want errHeld", err)
	}
	n, err := s.unlock.Run(ctx, c, []string{"k"}, "not-the-owner").Int()
	if err != nil || n != 0 {
		t.Fatalf("foreign unlock: %d %v", n, err)
	}
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "someone-else" {
		t.Fatalf("foreign unlock deleted the owner's key: %q %v", v, err)
	}
	if _, err := s.unlock.Run(ctx, c, []string{"absent"}, "x").Int(); err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
}

// tableRows returns the markdown rows of the table under the heading that
// starts with "### name:", keyed by contender.
func tableRows(t *testing.T, out, name string) map[string][]string {
	t.Helper()
	_, after, ok := strings.Cut(out, "### "+name+":")
	if !ok {
		t.Fatalf("no table for %s in:\n%s", name, out)
	}
	if i := strings.Index(after, "\n### "); i >= 0 {
		after = after[:i]
	}
	rows := map[string][]string{}
	for _, l := range strings.Split(after, "\n") {
		if !strings.HasPrefix(l, "| ") || strings.HasPrefix(l, "| contender") {
			continue
		}
		cells := strings.Split(strings.Trim(l, "| "), " | ")
		rows[cells[0]] = cells
	}
	return rows
}

// TestRunGivenAddrs runs lockbench on a bed given by -addrs and
// -etcd-addrs: the contenders run on those nodes, and the fault scenarios, which need a bed
// lockbench started itself, are skipped with a note. The bed fsyncs every
// second and the TTL and node timeout are generous, so that every
// contender's per-node timeouts (a fraction of the TTL for redsync) hold
// on a loaded machine: any error in the report is a real one.
func TestRunGivenAddrs(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Redis: 3, Etcd: 3, AppendFsync: testbed.FsyncEverySec})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, n := range bed.Redis {
		a := n.Admin()
		err := quorum.TrustNode(ctx, a)
		_ = a.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	err := run(ctx, []string{"-addrs", strings.Join(bed.RedisAddrs(), ","), "-etcd-addrs", strings.Join(bed.EtcdEndpoints(), ","), "-rounds", "1", "-ops", "20",
		"-scenarios", "solo-2,node-down", "-ttl", "20s", "-node-timeout", "2s", "-past-window=false", "-quiet"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	rows := tableRows(t, out.String(), "solo-2")
	for _, name := range contenderNames {
		r, ok := rows[name]
		if !ok || r[8] != "0" {
			t.Fatalf("contender %s missing or with errors in:\n%s", name, out.String())
		}
	}
	if !strings.Contains(out.String(), "note: node-down skipped") || strings.Contains(out.String(), "### node-down") {
		t.Fatalf("node-down not skipped with a note:\n%s", out.String())
	}
}

// TestRunEndToEnd runs lockbench as a user would, with the bed it starts
// itself (the local provider unless QUORUMLOCK_TESTBED says otherwise),
// through an uncontended, a contended and a fault scenario, and checks
// that the tables, the JSON and the plot hold every contender, with no
// error (the TTL and node timeout are generous, as in TestRunGivenAddrs).
func TestRunEndToEnd(t *testing.T) {
	if os.Getenv(testbed.EnvProvider) == "" {
		t.Setenv(testbed.EnvProvider, testbed.ProviderLocal)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	jsonPath, plotPath := filepath.Join(dir, "out.json"), filepath.Join(dir, "out.png")
	var out strings.Builder
	err := run(ctx, []string{"-rounds", "1", "-ops", "20", "-hot-duration", "200ms",
		"-scenarios", "solo-1,hot-16-0ms,slow-node", "-ttl", "20s", "-node-timeout", "2s", "-past-window=false",
		"-json", jsonPath, "-plot", plotPath, "-quiet"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	report := out.String()
	// Column of the errors in each kind of table.
	for scen, errCol := range map[string]int{"solo-1": 8, "hot-16-0ms": 9, "slow-node": 8} {
		rows := tableRows(t, report, scen)
		for _, name := range contenderNames {
			r, ok := rows[name]
			if scen == "hot-16-0ms" && name == nameFloor {
				if ok {
					t.Errorf("floor ran the hot scenario")
				}
				continue
			}
			if !ok || r[errCol] != "0" {
				t.Errorf("%s: contender %s missing or with errors", scen, name)
			}
		}
	}
	if t.Failed() {
		t.Fatalf("report:\n%s", report)
	}
	checkEndToEndJSON(t, jsonPath)
	checkPNG(t, plotPath)
}

// checkEndToEndJSON checks the figures TestRunEndToEnd wrote to path.
func checkEndToEndJSON(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got runJSON
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("JSON: %v\n%s", err, b)
	}
	if got.Nodes != 5 || got.EtcdMembers != etcdMembers || got.Config.EtcdTTLns != int64(defaultEtcdTTL) || len(got.Scenarios) != 3 {
		t.Fatalf("JSON: %d nodes, %d etcd members, config %+v, %d scenarios", got.Nodes, got.EtcdMembers, got.Config, len(got.Scenarios))
	}
	if sc := got.Scenarios[2]; sc.Kind != "slow-node" || !strings.HasPrefix(sc.EtcdFaultNode, "etcd") {
		t.Errorf("JSON: %s: the etcd member it slowed down is %q", sc.Name, sc.EtcdFaultNode)
	}
	for _, sc := range got.Scenarios {
		var names []string
		for _, c := range sc.Contenders {
			names = append(names, c.Name)
			if badEndToEnd(sc.Kind, c) {
				t.Errorf("JSON: %s %s: %+v", sc.Name, c.Name, c)
			}
		}
		want := contenderNames
		if sc.Kind == "hot" {
			want = slices.DeleteFunc(slices.Clone(contenderNames), func(n string) bool { return n == nameFloor })
			if !slices.Equal(sc.Skipped, []string{nameFloor}) {
				t.Errorf("JSON: %s skipped %q", sc.Name, sc.Skipped)
			}
		}
		if !slices.Equal(names, want) {
			t.Errorf("JSON: %s has contenders %q, want %q", sc.Name, names, want)
		}
	}
}

// badEndToEnd reports whether a contender's figures in a scenario of kind
// of TestRunEndToEnd are wrong.
func badEndToEnd(kind string, c contenderJSON) bool {
	bad := len(c.ThroughputPerRound) != 1 || c.Errors != 0 || c.Pair.P999ns < c.Pair.P50ns ||
		(c.Ops > 0 && (c.ThroughputPerRound[0] <= 0 || c.AllocsPerOp <= 0 || c.Pair.P50ns <= 0))
	switch kind {
	case "hot":
		// A hot round lasts a fixed time, short here: on a loaded machine
		// a contender that waits out redsync's retry delays may finish no
		// acquisition in it.
		return bad || c.MinShare == nil
	case "slow-node":
		return bad || c.Ops == 0 || c.Baseline == nil || c.Baseline.Pair.P50ns <= 0 || c.PairP50VsBaseline == nil
	}
	return bad || c.Ops != 20
}

// TestRunMixed runs a tiny mixed scenario end to end on the bed lockbench
// starts: three instances of every contender that waits, the hot key and
// the distinct keys each alone and together. Every such contender must
// hand the hot key over and finish distinct pairs in the mix, with no
// error (generous TTL and node timeout, as in TestRunEndToEnd), and the
// table and the JSON must hold the mixed figures.
func TestRunMixed(t *testing.T) {
	if os.Getenv(testbed.EnvProvider) == "" {
		t.Setenv(testbed.EnvProvider, testbed.ProviderLocal)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	jsonPath := filepath.Join(t.TempDir(), "out.json")
	var out strings.Builder
	err := run(ctx, []string{"-rounds", "1", "-hot-duration", "300ms", "-scenarios", "mixed-4-2-1ms",
		"-ttl", "20s", "-node-timeout", "2s", "-past-window=false", "-json", jsonPath, "-quiet"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	report := out.String()
	waiting := slices.DeleteFunc(slices.Clone(contenderNames), func(n string) bool { return n == nameFloor })
	rows := tableRows(t, report, "mixed-4-2-1ms")
	for _, name := range waiting {
		// hot/s mixed, distinct/s mixed, errors.
		if r, ok := rows[name]; !ok || len(r) != 14 || r[2] == "0" || r[5] == "0" || r[11] != "0" {
			t.Errorf("contender %s missing, idle in the mix or with errors: %q", name, r)
		}
	}
	if _, ok := rows[nameFloor]; ok || !strings.Contains(report, "not run (cannot wait for a held key): floor") {
		t.Error("floor ran the mixed scenario")
	}
	if t.Failed() {
		t.Fatalf("report:\n%s", report)
	}
	checkMixedJSON(t, jsonPath, waiting)
}

// checkMixedJSON checks the mixed figures lockbench wrote to path: every
// contender of want ran every phase with successes and no error, and the
// ratios are there.
func checkMixedJSON(t *testing.T, path string, want []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Scenarios []struct {
			Kind            string
			Workers         int
			DistinctWorkers int `json:"distinct_workers"`
			Instances       int
			Skipped         []string
			Contenders      []struct {
				Name  string
				Mixed *mixedJSON
			}
		}
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("JSON: %v\n%s", err, b)
	}
	if len(got.Scenarios) != 1 {
		t.Fatalf("JSON: %d scenarios", len(got.Scenarios))
	}
	sc := got.Scenarios[0]
	if sc.Kind != "mixed" || sc.Workers != 4 || sc.DistinctWorkers != 2 || sc.Instances != mixedInstances || !slices.Equal(sc.Skipped, []string{nameFloor}) {
		t.Errorf("JSON: scenario %+v", sc)
	}
	var names []string
	for _, c := range sc.Contenders {
		names = append(names, c.Name)
		m := c.Mixed
		if m == nil || m.Errors != 0 || m.HotMixedVsAlone == nil || m.DistinctMixedVsAlone == nil || len(m.HotMixedVsAlonePerRound) != 1 {
			t.Errorf("JSON: %s: %+v", c.Name, m)
			continue
		}
		for _, p := range []phaseJSON{m.HotAlone, m.HotMixed, m.DistinctAlone, m.DistinctMixed} {
			if p.Ops <= 0 || p.MedianPerSecond <= 0 || len(p.PerSecondPerRound) != 1 || p.Pair.Count != p.Ops || p.Pair.P50ns <= 0 {
				t.Errorf("JSON: %s: phase %+v", c.Name, p)
			}
		}
		if m.HotMixed.Acquire.Count == 0 || m.HotMixed.MinShare == nil || m.HotMixedVsRedsync == nil {
			t.Errorf("JSON: %s: %+v", c.Name, m)
		}
	}
	if !slices.Equal(names, want) {
		t.Errorf("JSON: contenders %q, want %q", names, want)
	}
}
