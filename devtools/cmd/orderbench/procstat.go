package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// clockTicks is the unit of the CPU times of /proc: USER_HZ, 100 a
// second on Linux whatever the kernel's own tick.
const clockTicks = 100

// Process groups of the bed, as -cpu-split names them. The HA group's
// data nodes go by their names (pgha1, pgha2) until the report knows which
// was the primary.
const (
	groupRedis    = "redis"
	groupPostgres = "postgres"
	groupMonitor  = "monitor"
	groupEtcd     = "etcd"
	groupOther    = "other"
)

// procInfo is what /proc/<pid>/stat says of one process: its command
// name, its parent, and its CPU time with that of its children it has
// waited for, in clock ticks.
type procInfo struct {
	comm  string
	ppid  int
	ticks int64
}

// parseProcStat reads the content of /proc/<pid>/stat.
func parseProcStat(b []byte) (procInfo, error) {
	// The command name is in parentheses and may hold spaces and
	// parentheses: the fields after the last ')' are "state ppid ...".
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return procInfo{}, fmt.Errorf("unreadable stat %q", b)
	}
	f := bytes.Fields(b[end+1:])
	// f[k-3] is field k of proc(5): ppid 4, utime 14, stime 15, cutime
	// 16, cstime 17.
	if len(f) < 15 {
		return procInfo{}, fmt.Errorf("unreadable stat %q", b)
	}
	p := procInfo{comm: string(b[open+1 : end])}
	var err error
	if p.ppid, err = strconv.Atoi(string(f[1])); err != nil {
		return procInfo{}, fmt.Errorf("stat: ppid: %w", err)
	}
	for _, i := range []int{11, 12, 13, 14} {
		n, err := strconv.ParseInt(string(f[i]), 10, 64)
		if err != nil {
			return procInfo{}, fmt.Errorf("stat: field %d: %w", i+3, err)
		}
		p.ticks += n
	}
	return p, nil
}

// readProcs reads every process of /proc; one that ends meanwhile is left
// out.
func readProcs() (map[int]procInfo, error) {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return nil, err
	}
	out := make(map[int]procInfo, len(dirs))
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		if p, err := parseProcStat(b); err == nil {
			out[pid] = p
		}
	}
	return out, nil
}

// selfTicks is this process's own CPU time, in clock ticks: its threads'
// user and system time (not its children's).
func selfTicks() (int64, error) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, err
	}
	end := bytes.LastIndexByte(b, ')')
	f := bytes.Fields(b[end+1:])
	if end < 0 || len(f) < 13 {
		return 0, fmt.Errorf("unreadable stat %q", b)
	}
	var sum int64
	for _, i := range []int{11, 12} {
		n, err := strconv.ParseInt(string(f[i]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("stat: field %d: %w", i+3, err)
		}
		sum += n
	}
	return sum, nil
}

// machineTicks reads the first line of /proc/stat: the clock ticks all
// CPUs spent busy, and in all, since boot.
func machineTicks() (busy, total int64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("unreadable /proc/stat line %q", line)
	}
	// user nice system idle iowait irq softirq steal (guest time is in user).
	for i, s := range f[1:9] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %w", err)
		}
		total += n
		if i != 3 && i != 4 {
			busy += n
		}
	}
	return busy, total, nil
}

// treeTicks sums the CPU time of root and every process below it, each
// with its waited-for children's: a process that ended between two
// readings counts in its parent's once the parent has reaped it.
func treeTicks(procs map[int]procInfo, children map[int][]int, root int) (ticks int64, tree []int) {
	tree = []int{root}
	for i := 0; i < len(tree); i++ {
		tree = append(tree, children[tree[i]]...)
	}
	for _, pid := range tree {
		ticks += procs[pid].ticks
	}
	return ticks, tree
}

// procGroups classifies the bed's processes: the trees of this process's
// children, each by its root's command (redis-server, postgres, etcd) or,
// for a pg_autoctl service, by the HA group directory its command lines
// name. Classifications are kept per root.
type procGroups struct {
	// nodeDirs are the HA group's data nodes' directories, by node name,
	// each with a trailing "/"; groupDir the group's.
	nodeDirs map[string]string
	groupDir string
	known    map[int]string
}

// newProcGroups returns the classifier of a bed whose HA group, if any,
// has data nodes nodes (name to directory).
func newProcGroups(nodes map[string]string) *procGroups {
	g := &procGroups{nodeDirs: map[string]string{}, known: map[int]string{}}
	for name, dir := range nodes {
		g.nodeDirs[name] = dir + "/"
		g.groupDir = filepath.Dir(dir) + "/"
	}
	return g
}

// sample returns the CPU time of every group of the bed, in clock ticks.
func (g *procGroups) sample() (map[string]int64, error) {
	procs, err := readProcs()
	if err != nil {
		return nil, err
	}
	children := map[int][]int{}
	for pid, p := range procs {
		children[p.ppid] = append(children[p.ppid], pid)
	}
	out := map[string]int64{}
	for _, root := range children[os.Getpid()] {
		ticks, tree := treeTicks(procs, children, root)
		name, ok := g.known[root]
		if !ok {
			name = g.classify(procs[root].comm, tree)
			g.known[root] = name
		}
		out[name] += ticks
	}
	return out, nil
}

// classify names the group of a tree whose root runs comm.
func (g *procGroups) classify(comm string, tree []int) string {
	switch comm {
	case "redis-server":
		return groupRedis
	case "postgres":
		return groupPostgres
	case "etcd":
		return groupEtcd
	case "pg_autoctl":
	default:
		return groupOther
	}
	inGroup := false
	for _, pid := range tree {
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		for name, dir := range g.nodeDirs {
			if bytes.Contains(cmd, []byte(dir)) {
				return name
			}
		}
		inGroup = inGroup || (g.groupDir != "" && bytes.Contains(cmd, []byte(g.groupDir)))
	}
	if inGroup {
		return groupMonitor
	}
	return groupOther
}
