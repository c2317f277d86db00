package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/pprof"
	"slices"
	"time"
)

// Roles of this process's goroutines, the values of their pprof label
// roleKey: every goroutine started while a role's label is set inherits it.
const (
	roleKey = "orderbench"
	// roleInstances: the instances' servers, services, pools, clients and
	// locks (what ordersd would spend).
	roleInstances = "instances"
	// roleClients: the load's users and their HTTP client.
	roleClients = "clients"
	// roleBed: the bed's in-process proxies.
	roleBed = "bed"
)

// roleLabels is the label set of role.
func roleLabels(role string) pprof.LabelSet { return pprof.Labels(roleKey, role) }

// cpuMeter measures the CPU time of the bed's processes and of this
// process over runs' windows.
type cpuMeter struct {
	groups *procGroups
	// nodes are the HA group's data nodes' names.
	nodes []string
}

// cpuReading is one reading of the CPU times, in clock ticks.
type cpuReading struct {
	self        int64
	groups      map[string]int64
	busy, total int64
}

// read reads every CPU time.
func (m *cpuMeter) read() (cpuReading, error) {
	var r cpuReading
	var err error
	if r.self, err = selfTicks(); err != nil {
		return r, err
	}
	if r.groups, err = m.groups.sample(); err != nil {
		return r, err
	}
	r.busy, r.total, err = machineTicks()
	return r, err
}

// cpuWindow is the CPU time spent over one run's window: this process's,
// each group's of the bed's processes and the whole machine's (busy and
// in all), in clock ticks, and this process's by role in its CPU profile,
// in nanoseconds ("" for no role).
type cpuWindow struct {
	window      time.Duration
	self        int64
	groups      map[string]int64
	busy, total int64
	roles       map[string]int64
	nodes       []string
	// primary is the HA group's primary before the run ("" without the
	// group).
	primary string
	problem string
}

// measure measures the CPU over window w, from its start to its end (a
// fixed window's), in the background; the returned function waits for the
// end of the measurement and returns it.
func (m *cpuMeter) measure(ctx context.Context, w *liveWindow) (wait func() *cpuWindow) {
	done := make(chan *cpuWindow, 1)
	go func() {
		c, err := m.over(ctx, w)
		if err != nil {
			c = &cpuWindow{problem: err.Error()}
		}
		done <- c
	}()
	return func() *cpuWindow { return <-done }
}

// over reads the CPU times at w's start and end and profiles this process
// in between.
func (m *cpuMeter) over(ctx context.Context, w *liveWindow) (*cpuWindow, error) {
	w.mu.Lock()
	start, end := w.start, w.end
	w.mu.Unlock()
	if end.IsZero() {
		return nil, errors.New("-cpu-split: the window has no fixed end")
	}
	if !sleepUntil(ctx, start) {
		return nil, ctx.Err()
	}
	r0, err := m.read()
	if err != nil {
		return nil, fmt.Errorf("-cpu-split: %w", err)
	}
	t0 := time.Now()
	var prof bytes.Buffer
	if err := pprof.StartCPUProfile(&prof); err != nil {
		return nil, fmt.Errorf("-cpu-split: %w", err)
	}
	ok := sleepUntil(ctx, end)
	pprof.StopCPUProfile()
	if !ok {
		return nil, ctx.Err()
	}
	r1, err := m.read()
	if err != nil {
		return nil, fmt.Errorf("-cpu-split: %w", err)
	}
	c := &cpuWindow{window: time.Since(t0), self: r1.self - r0.self, busy: r1.busy - r0.busy, total: r1.total - r0.total,
		groups: map[string]int64{}, nodes: m.nodes}
	for g, t := range r1.groups {
		c.groups[g] = t - r0.groups[g]
	}
	if c.roles, err = profileByLabel(prof.Bytes(), roleKey); err != nil {
		return nil, fmt.Errorf("-cpu-split: %w", err)
	}
	return c, nil
}

// cpuSplitJSON is the CPU time spent over one run's window, by part, in
// cores: CPU seconds per second of the window (1 is one core busy all
// along). The in-process parts share out Process by its CPU profile.
type cpuSplitJSON struct {
	WindowNs int64 `json:"window_ns"`
	// Capacity is the machine's CPUs; Busy what all of them spent; Idle
	// the rest.
	Capacity float64 `json:"capacity"`
	Busy     float64 `json:"busy"`
	Idle     float64 `json:"idle"`
	// Process is this process; Instances, Clients, BedProxies and Runtime
	// its parts (Runtime: goroutines of no role, as the Go runtime's GC
	// workers).
	Process    float64 `json:"process"`
	Instances  float64 `json:"instances"`
	Clients    float64 `json:"clients"`
	BedProxies float64 `json:"bed_proxies"`
	Runtime    float64 `json:"runtime"`
	// The bed's processes, each with every process below it.
	Redis    float64 `json:"redis"`
	Postgres float64 `json:"postgres"`
	Primary  float64 `json:"ha_primary"`
	Standby  float64 `json:"ha_standby"`
	Monitor  float64 `json:"ha_monitor"`
	Etcd     float64 `json:"etcd"`
	OtherBed float64 `json:"other_bed"`
	// Rest is what the machine spent outside this process and the bed.
	Rest float64 `json:"rest_of_machine"`
	// PrimaryNode names the node counted as the primary.
	PrimaryNode string `json:"primary_node,omitempty"`
	Problem     string `json:"problem,omitempty"`
}

// splitFigures turns a window's CPU times into cores.
func splitFigures(c *cpuWindow) *cpuSplitJSON {
	if c.problem != "" {
		return &cpuSplitJSON{Problem: c.problem}
	}
	secs := c.window.Seconds()
	cores := func(ticks int64) float64 { return float64(ticks) / clockTicks / secs }
	s := &cpuSplitJSON{WindowNs: int64(c.window), Capacity: cores(c.total), Busy: cores(c.busy), Idle: cores(c.total - c.busy),
		Process: cores(c.self), Redis: cores(c.groups[groupRedis]), Postgres: cores(c.groups[groupPostgres]),
		Monitor: cores(c.groups[groupMonitor]), Etcd: cores(c.groups[groupEtcd]), OtherBed: cores(c.groups[groupOther])}
	var sampled int64
	for _, ns := range c.roles {
		sampled += ns
	}
	if sampled > 0 {
		part := func(role string) float64 { return s.Process * float64(c.roles[role]) / float64(sampled) }
		s.Instances, s.Clients, s.BedProxies, s.Runtime = part(roleInstances), part(roleClients), part(roleBed), part("")
	}
	primary := c.primary
	if !slices.Contains(c.nodes, primary) && len(c.nodes) > 0 {
		primary = c.nodes[0]
		s.Problem = "no primary named before the run: " + c.nodes[0] + " counted as the primary"
	}
	s.PrimaryNode = primary
	bed := c.self
	for g, t := range c.groups {
		bed += t
		switch {
		case g == primary:
			s.Primary = cores(t)
		case slices.Contains(c.nodes, g):
			s.Standby += cores(t)
		}
	}
	s.Rest = cores(c.busy - bed)
	return s
}

// reportCPU prints the CPU split of every closed-loop run that has one.
func reportCPU(out io.Writer, s summaryJSON) {
	var rows []runJSON
	for _, r := range s.Runs {
		if r.CPU != nil {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "CPU split over each run's window, in cores (CPU seconds per second; the machine has the capacity's worth):")
	fmt.Fprintln(out, "from /proc, each bed process with every process below it; orderbench's own split by role with a CPU profile of the window:")
	fmt.Fprintln(out, "ordersd = the three in-process instances, clients = the load, proxies = the bed's in-process proxies, runtime = the rest (GC workers, ...);")
	fmt.Fprintln(out, "rest = the machine's busy time outside orderbench and the bed.")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| scenario | mode | postgres | orders/s | ordersd | clients | proxies | runtime | redis | pg single | pg primary | pg standby | pg monitor | etcd, other | rest | idle | capacity |")
	fmt.Fprintln(out, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		c := r.CPU
		if c.Capacity == 0 {
			fmt.Fprintf(out, "| %s | %s | %s | %.0f | %s |\n", r.Name, modeLabel(r.Mode, r.Backend), r.Postgres, r.CreatedPerSec, c.Problem)
			continue
		}
		fmt.Fprintf(out, "| %s | %s | %s | %.0f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n",
			r.Name, modeLabel(r.Mode, r.Backend), r.Postgres, r.CreatedPerSec, c.Instances, c.Clients, c.BedProxies, c.Runtime,
			c.Redis, c.Postgres, c.Primary, c.Standby, c.Monitor, c.Etcd+c.OtherBed, c.Rest, c.Idle, c.Capacity)
	}
}
