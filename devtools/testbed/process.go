package testbed

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// proc is one server process started by the local provider.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // the Wait result, readable after done is closed
}

// startProc starts argv with env added to the environment and output going
// to logPath. With runAs set it runs as that user.
func startProc(argv []string, env []string, logPath string, runAs *user.User) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if runAs != nil {
		cred, err := credential(runAs)
		if err != nil {
			return nil, err
		}
		cmd.SysProcAttr.Credential = cred
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func credential(u *user.User) (*syscall.Credential, error) {
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func (p *proc) signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return fmt.Errorf("process %d has exited: %v", p.cmd.Process.Pid, p.err)
	default:
	}
	return p.cmd.Process.Signal(sig)
}

// stop sends sig and waits for the process to end, escalating to SIGKILL
// after grace.
func (p *proc) stop(sig syscall.Signal, grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	if sig == syscall.SIGKILL {
		<-p.done
		return
	}
	// A stopped process must be continued to act on a signal.
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// freePorts returns n distinct free loopback ports.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// tail returns the last lines of a log file, for error messages.
func tail(path string, max int) string { return tailFrom(path, 0, max) }

// tailFrom is tail of what the file holds past offset from: the lines of
// one start, not an earlier one's.
func tailFrom(path string, from int64, max int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if from > 0 && from <= int64(len(b)) {
		b = b[from:]
	}
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// resetDir empties dir, creating it if needed.
func resetDir(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.MkdirAll(dir, 0o755)
}

// stopped reports whether every thread of the process is stopped (state T
// in /proc): SIGSTOP is queued at once, but the threads of a busy process
// stop one by one, and until the last one has, the server can still answer.
func (p *proc) stopped() (bool, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", p.cmd.Process.Pid))
	if err != nil || len(tasks) == 0 {
		return false, fmt.Errorf("process %d: no threads listed in /proc: %v", p.cmd.Process.Pid, err)
	}
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			return false, err
		}
		// The state follows the command name, which is in parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return false, fmt.Errorf("%s: unreadable: %q", t, b)
		}
		// T or t: stopped; Z or X: a thread that has ended.
		if s := b[i+2]; s != 'T' && s != 't' && s != 'Z' && s != 'X' {
			return false, nil
		}
	}
	return true, nil
}

// pause sends SIGSTOP and returns once every thread has stopped, or fails
// when that takes longer than 5s or ctx ends first.
func (p *proc) pause(ctx context.Context) error {
	if err := p.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		ok, err := p.stopped()
		if ok || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("process %d: SIGSTOP sent, but not every thread stopped: %w", p.cmd.Process.Pid, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}
