package integration_test

// Process helpers of the order-event drills (events_test.go): building a
// command with its failpoints, running cmd/shipper on the bed, reading its
// /metrics. They reuse the drills' daemon and lineLog (drills_test.go):
// a process's stderr kept line by line, waits for a line, for a SIGKILL,
// and the kill at cleanup.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// failpointBuilds builds each command with -tags failpoints once for the
// whole test binary: the drills on Redis and on etcd and the event drills
// all run the same ordersd, and a link of it costs seconds. TestMain
// removes the directory.
type failpointBuilds struct {
	mu    sync.Mutex
	dir   string
	built map[string]*failpointBuild
}

// failpointBuild is one command's build, done once.
type failpointBuild struct {
	once sync.Once
	path string
	err  error
}

// builds is the test binary's failpointBuilds (see TestMain).
var builds failpointBuilds

// path builds the command pkg (an import path), the first time it is
// asked for, and returns the binary's path.
func (b *failpointBuilds) path(pkg string) (string, error) {
	b.mu.Lock()
	if b.built == nil {
		b.built = map[string]*failpointBuild{}
	}
	bd := b.built[pkg]
	if bd == nil {
		bd = &failpointBuild{}
		b.built[pkg] = bd
	}
	if b.dir == "" {
		b.dir, bd.err = os.MkdirTemp("", "quorumlock-failpoints-*")
	}
	dir := b.dir
	b.mu.Unlock()
	bd.once.Do(func() {
		if bd.err == nil {
			bd.path, bd.err = buildFailpoints(dir, pkg)
		}
	})
	return bd.path, bd.err
}

// remove deletes the binaries.
func (b *failpointBuilds) remove() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
}

// buildFailpoints builds the command pkg (an import path) with -tags
// failpoints into dir and returns the binary's path.
func buildFailpoints(dir, pkg string) (string, error) {
	gocmd, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("the go command is needed to build %s: %w", pkg, err)
	}
	bin := filepath.Join(dir, filepath.Base(pkg))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, gocmd, "build", "-tags", "failpoints", "-o", bin, pkg).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build -tags failpoints %s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}

// startShipper runs the shipper binary bin with env (over nothing: the
// caller gives every setting it needs, and the test process's own ORDERS_*,
// SHIPPER_* and failpoint variables are not passed on), and waits until it
// listens. SHIPPER_LISTEN should be 127.0.0.1:0 and ORDERS_LOG_FORMAT json:
// the address is read from the JSON line "shipper listening".
func startShipper(t *testing.T, bin, name string, env map[string]string) *daemon {
	t.Helper()
	return spawn(t, "shipper", name, exec.Command(bin), env, "ORDERS_", "SHIPPER_")
}

// terminate sends SIGTERM and checks that the process exits 0 within d,
// having logged msg.
func (p *daemon) terminate(t *testing.T, d time.Duration, msg string) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM %s: %v", p.name, err)
	}
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("%s still runs %v after SIGTERM; stderr:\n%s", p.name, d, p.log.tail(20))
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("%s exited %v after SIGTERM, want 0; stderr:\n%s", p.name, p.cmd.ProcessState, p.log.tail(20))
	}
	if _, found, _, _ := p.log.find(func(l string) bool { return strings.Contains(l, `"msg":"`+msg+`"`) }); !found {
		t.Fatalf("%s did not log %q; stderr:\n%s", p.name, msg, p.log.tail(20))
	}
}

// sample is one line of a Prometheus text exposition.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

var labelRE = regexp.MustCompile(`(\w+)="((?:[^"\\]|\\.)*)"`)

// scrape reads the samples of p's /metrics.
func scrape(t *testing.T, p *daemon) []sample {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(p.base + "/metrics")
	if err != nil {
		t.Fatalf("%s /metrics: %v", p.name, err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s /metrics: %d %v", p.name, resp.StatusCode, err)
	}
	var out []sample
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			t.Fatalf("%s /metrics: line %q", p.name, line)
		}
		s := sample{name: line[:sp], labels: map[string]string{}, value: v}
		if i := strings.IndexByte(line[:sp], '{'); i >= 0 {
			s.name = line[:i]
			for _, m := range labelRE.FindAllStringSubmatch(line[i:sp], -1) {
				s.labels[m[1]] = m[2]
			}
		}
		out = append(out, s)
	}
	return out
}

// metric sums the samples of name whose labels include every pair of kv
// (label, value, label, value...).
func metric(ss []sample, name string, kv ...string) float64 {
	total := 0.0
next:
	for _, s := range ss {
		if s.name != name {
			continue
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if s.labels[kv[i]] != kv[i+1] {
				continue next
			}
		}
		total += s.value
	}
	return total
}
