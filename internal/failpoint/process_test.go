//go:build linux

package failpoint

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helperEnv makes the test binary, re-run by these tests, play a process
// that reaches the after-lock failpoint twice.
const helperEnv = "FAILPOINT_TEST_HELPER"

// TestHelperProcess is the child process of the tests below; run directly
// it does nothing.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		return
	}
	s, err := FromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(2)
	}
	s.Hit(AfterLock)
	fmt.Fprintln(os.Stderr, "passed after-lock")
	s.Hit(AfterLock)
	fmt.Fprintln(os.Stderr, "passed after-lock again")
	os.Exit(0)
}

// child is a running helper process and its stderr, line by line.
type child struct {
	cmd   *exec.Cmd
	lines chan string // closed at EOF
	done  chan struct{}
	state *os.ProcessState // set before done is closed
}

func startChild(t *testing.T, spec string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	// GORACE: a race-enabled child would sleep 1s at exit.
	cmd.Env = append(os.Environ(), helperEnv+"=1", EnvVar+"="+spec, "GORACE=atexit_sleep_ms=0")
	// A group of its own: when a process group with a stopped member is
	// orphaned, the kernel continues that member (SIGHUP, SIGCONT) as soon
	// as any other member exits, which would end the stop early.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, lines: make(chan string, 16), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		_ = cmd.Wait() // the exit status is in ProcessState
		c.state = cmd.ProcessState
		close(c.done)
	}()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			_ = cmd.Process.Kill()
			for range c.lines {
			}
			<-c.done
		}
	})
	return c
}

// next returns the child's next stderr line, or fails after d.
func (c *child) next(t *testing.T, d time.Duration) (string, bool) {
	t.Helper()
	select {
	case l, ok := <-c.lines:
		return l, ok
	case <-time.After(d):
		t.Fatalf("no stderr line from the child within %v", d)
		return "", false
	}
}

// rest reads every remaining line and waits for the exit.
func (c *child) rest(t *testing.T) []string {
	t.Helper()
	var out []string
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				select {
				case <-c.done:
				case <-deadline:
					t.Fatal("the child did not exit")
				}
				return out
			}
			out = append(out, l)
		case <-deadline:
			t.Fatalf("the child did not exit; it wrote %q", out)
		}
	}
}

func (c *child) signaled() (syscall.Signal, bool) {
	ws, ok := c.state.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return 0, false
	}
	return ws.Signal(), true
}

const reached = "failpoint after-lock reached"

var passed = []string{"passed after-lock", "passed after-lock again"}

func TestKill(t *testing.T) {
	c := startChild(t, "after-lock=kill")
	out := c.rest(t)
	sig, killed := c.signaled()
	if !Enabled {
		if killed || c.state.ExitCode() != 0 || strings.Join(out, "\n") != strings.Join(passed, "\n") {
			t.Fatalf("production build: %v, stderr %q", c.state, out)
		}
		return
	}
	if !killed || sig != syscall.SIGKILL {
		t.Fatalf("want death by SIGKILL, got %v", c.state)
	}
	// Nothing ran after the kill: no line after the announcement.
	if len(out) != 1 || out[0] != reached {
		t.Fatalf("stderr %q, want only %q", out, reached)
	}
}

// kill@2 passes the first Hit and kills on the second.
func TestKillOnTheSecondHit(t *testing.T) {
	c := startChild(t, "after-lock=kill@2")
	out := c.rest(t)
	sig, killed := c.signaled()
	if !Enabled {
		if killed || c.state.ExitCode() != 0 {
			t.Fatalf("production build: %v, stderr %q", c.state, out)
		}
		return
	}
	if !killed || sig != syscall.SIGKILL {
		t.Fatalf("want death by SIGKILL, got %v", c.state)
	}
	if want := []string{"passed after-lock", reached}; strings.Join(out, "\n") != strings.Join(want, "\n") {
		t.Fatalf("stderr %q, want %q", out, want)
	}
}

func TestStop(t *testing.T) {
	c := startChild(t, "after-lock=stop")
	if !Enabled {
		if out := c.rest(t); c.state.ExitCode() != 0 || strings.Join(out, "\n") != strings.Join(passed, "\n") {
			t.Fatalf("production build: %v, stderr %q", c.state, out)
		}
		return
	}
	if l, _ := c.next(t, 30*time.Second); l != reached {
		t.Fatalf("first line %q, want %q", l, reached)
	}
	pid := c.cmd.Process.Pid
	deadline := time.Now().Add(10 * time.Second)
	for procState(t, pid) != "T" {
		if time.Now().After(deadline) {
			t.Fatalf("the child announced the stop but is in state %q", procState(t, pid))
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Hold it stopped longer than the failpoint's own confirmation wait,
	// as drills do: continued, it must run on, not stop itself again.
	time.Sleep(1500 * time.Millisecond) // the failpoint waits 1s for the SIGCONT
	if st := procState(t, pid); st != "T" {
		t.Fatalf("the child left its stop by itself: state %q", st)
	}
	select {
	case l := <-c.lines:
		t.Fatalf("a stopped child wrote %q", l)
	default:
	}
	if err := c.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// Continued, it runs on, and the second Hit of the point passes.
	out := c.rest(t)
	if c.state.ExitCode() != 0 || strings.Join(out, "\n") != strings.Join(passed, "\n") {
		t.Fatalf("after SIGCONT: %v, stderr %q", c.state, out)
	}
}

// A point that is not armed passes in every build.
func TestUnarmedPointPasses(t *testing.T) {
	c := startChild(t, "after-commit=kill")
	if out := c.rest(t); c.state.ExitCode() != 0 || strings.Join(out, "\n") != strings.Join(passed, "\n") {
		t.Fatalf("%v, stderr %q", c.state, out)
	}
}

// procState is the state letter of process pid in /proc (R, S, T, ...).
func procState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// "pid (comm) S ...": comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+3 > len(s) {
		t.Fatalf("cannot parse /proc/%d/stat: %q", pid, s)
	}
	return s[i+2 : i+3]
}
