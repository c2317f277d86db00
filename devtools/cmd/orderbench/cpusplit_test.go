package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime/pprof"
	"strings"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	line := "4242 (pg (auto) ctl) S 17 4242 4242 0 -1 4194560 100 0 0 0 120 30 7 3 20 0 1 0 100 0 0\n"
	p, err := parseProcStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if p.comm != "pg (auto) ctl" || p.ppid != 17 || p.ticks != 160 {
		t.Fatalf("parsed %+v", p)
	}
	for _, bad := range []string{"", "1 (x S 1", "1 (x) S", "1 (x) S y 1 1 0 -1 0 0 0 0 0 1 1 1 1"} {
		if _, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("parseProcStat(%q) accepted", bad)
		}
	}
}

// burn spins for d, counting its turns in n.
func burn(d time.Duration, n *int) {
	for end := time.Now().Add(d); time.Now().Before(end); {
		*n++
	}
}

// TestProfileByLabel: the CPU time of goroutines under a label is summed
// under its value, the rest under "".
func TestProfileByLabel(t *testing.T) {
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		t.Skipf("a CPU profile is already running: %v", err)
	}
	var n int
	pprof.Do(context.Background(), roleLabels(roleClients), func(context.Context) { burn(600*time.Millisecond, &n) })
	burn(200*time.Millisecond, &n)
	pprof.StopCPUProfile()
	by, err := profileByLabel(buf.Bytes(), roleKey)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, ns := range by {
		total += ns
	}
	// On a loaded machine the spinning goroutine gets less CPU than the
	// wall time; the labelled part still dominates.
	if by[roleClients] < 100*int64(time.Millisecond) || float64(by[roleClients]) < 0.5*float64(total) || len(by) > 2 {
		t.Fatalf("by label: %v", by)
	}
	if _, err := profileByLabel([]byte("not a profile"), roleKey); !errors.Is(err, errProfile) {
		t.Fatalf("garbage: %v", err)
	}
}

// TestProcGroups: a child's tree is counted, with its CPU time, in the
// group its command names; the machine's and this process's ticks are
// read.
func TestProcGroups(t *testing.T) {
	dir := t.TempDir() + "/pgha/pgha1"
	// The shell spins a while, then waits; its command line names the
	// data node's directory, as a pg_autoctl service's does.
	cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; exec sleep 60", "sh", dir+"/data")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	// Until the child has exec'd, its command line is this test binary's.
	for wait := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid))
		if strings.Contains(string(b), dir) {
			break
		}
		if time.Now().After(wait) {
			t.Fatalf("the child's command line never named %s: %q", dir, b)
		}
	}
	g := newProcGroups(map[string]string{"pgha1": dir})
	if got := g.classify("pg_autoctl", []int{cmd.Process.Pid}); got != "pgha1" {
		t.Fatalf("classify = %q, want pgha1", got)
	}
	if got := g.classify("sleep", []int{cmd.Process.Pid}); got != groupOther {
		t.Fatalf("classify sleep = %q", got)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		groups, err := g.sample()
		if err != nil {
			t.Fatal(err)
		}
		// The shell's comm is sh: another group of the bed.
		if groups[groupOther] > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the spinning child has no CPU time after 30 s: %v", groups)
		}
		time.Sleep(50 * time.Millisecond)
	}
	busy, total, err := machineTicks()
	if err != nil || busy <= 0 || total < busy {
		t.Fatalf("machine: busy %d, total %d, %v", busy, total, err)
	}
	var n int
	burn(100*time.Millisecond, &n)
	if self, err := selfTicks(); err != nil || self <= 0 {
		t.Fatalf("self: %d, %v", self, err)
	}
}

func TestSplitFigures(t *testing.T) {
	c := &cpuWindow{window: 2 * time.Second, self: 100, busy: 380, total: 400,
		groups:  map[string]int64{groupRedis: 40, "pgha1": 20, "pgha2": 120, groupMonitor: 10, groupOther: 10},
		roles:   map[string]int64{roleInstances: 6, roleClients: 2, roleBed: 1, "": 1},
		nodes:   []string{"pgha1", "pgha2"},
		primary: "pgha2"}
	s := splitFigures(c)
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	for name, v := range map[string][2]float64{
		"capacity": {s.Capacity, 2}, "busy": {s.Busy, 1.9}, "idle": {s.Idle, 0.1}, "process": {s.Process, 0.5},
		"instances": {s.Instances, 0.3}, "clients": {s.Clients, 0.1}, "proxies": {s.BedProxies, 0.05}, "runtime": {s.Runtime, 0.05},
		"redis": {s.Redis, 0.2}, "primary": {s.Primary, 0.6}, "standby": {s.Standby, 0.1}, "monitor": {s.Monitor, 0.05},
		"other bed": {s.OtherBed, 0.05}, "rest": {s.Rest, 0.4},
	} {
		if !near(v[0], v[1]) {
			t.Errorf("%s = %v, want %v", name, v[0], v[1])
		}
	}
	if s.PrimaryNode != "pgha2" || s.Problem != "" {
		t.Fatalf("split %+v", s)
	}
	c.primary = noPrimary
	if s := splitFigures(c); s.PrimaryNode != "pgha1" || !strings.Contains(s.Problem, "no primary") || !near(s.Primary, 0.1) {
		t.Fatalf("without a primary: %+v", s)
	}
	if s := splitFigures(&cpuWindow{problem: "boom"}); s.Problem != "boom" || s.Capacity != 0 {
		t.Fatalf("failed measurement: %+v", s)
	}
}
