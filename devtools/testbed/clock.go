package testbed

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// clockShimSource is the LD_PRELOAD library that moves a server's clocks
// by the offsets in its clock file; see the comment at its top.
//
//go:embed clockshim/clockshim.c
var clockShimSource string

// clockFiles are the files of one node's clock, on this machine.
type clockFiles struct {
	shim   string // the shared library to preload
	offset string // the node's clock file: two int64s of nanoseconds
}

// buildClockShim compiles the clock shim into dir and returns the path of
// the shared library.
//
// It is linked with -nostdlib and makes its system calls itself, so it
// needs nothing from the C library but two symbols every glibc has
// (environ, __errno_location): a shim built on this machine loads into a
// container of another glibc version as well.
func buildClockShim(ctx context.Context, dir string) (string, error) {
	compilers := []string{"cc", "gcc", "clang"}
	var cc string
	for _, name := range compilers {
		if p, err := exec.LookPath(name); err == nil {
			cc = p
			break
		}
	}
	if cc == "" {
		return "", fmt.Errorf("building the clock shim needs a C compiler, and none of %s is on PATH (install one: apt-get install -y gcc): %w",
			strings.Join(compilers, ", "), exec.ErrNotFound)
	}
	src := filepath.Join(dir, "clockshim.c")
	if err := os.WriteFile(src, []byte(clockShimSource), 0o644); err != nil {
		return "", fmt.Errorf("clock shim: %w", err)
	}
	out := filepath.Join(dir, "clockshim.so")
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cc, "-shared", "-fPIC", "-O2", "-nostdlib", "-fno-stack-protector", "-fno-builtin",
		"-Wall", "-Wl,-z,noexecstack", "-o", out, src)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("compile the clock shim with %s: %w\n%s", cc, err, msg)
	}
	// Readable by the server whatever user it runs as.
	if err := os.Chmod(out, 0o755); err != nil {
		return "", fmt.Errorf("clock shim: %w", err)
	}
	return out, nil
}

// Offsets in a clock file, in bytes: the shim reads the wall offset at
// offsetWall and the monotonic one at offsetMonotonic.
const (
	offsetWall      = 0
	offsetMonotonic = 8
	clockFileSize   = 16
)

// clockFileEnv names the environment variable that tells the shim where the
// node's clock file is; clockVDSOEnv, set to 1, makes the shim install its
// vDSO for a Go program (see clockshim.c).
const (
	clockFileEnv = "QUORUMLOCK_CLOCK_FILE"
	clockVDSOEnv = "QUORUMLOCK_CLOCK_VDSO"
)

// newClockFiles creates a node's clock file in dir, with offsets of 0.
func newClockFiles(dir, shim string) (*clockFiles, error) {
	c := &clockFiles{shim: shim, offset: filepath.Join(dir, "clock-offset")}
	if err := os.WriteFile(c.offset, make([]byte, clockFileSize), 0o644); err != nil {
		return nil, fmt.Errorf("clock file: %w", err)
	}
	return c, nil
}

// read returns the offset at byte at of the clock file.
func (c *clockFiles) read(at int64) (time.Duration, error) {
	f, err := os.Open(c.offset)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var b [8]byte
	if _, err := f.ReadAt(b[:], at); err != nil {
		return 0, err
	}
	return time.Duration(int64(binary.NativeEndian.Uint64(b[:]))), nil
}

// write sets the offset at byte at of the clock file. The shim maps the
// file: it is written in place, never truncated or replaced.
func (c *clockFiles) write(at int64, d time.Duration) error {
	f, err := os.OpenFile(c.offset, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], uint64(d.Nanoseconds()))
	_, err = f.WriteAt(b[:], at)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// SetClockOffset moves the node's wall clock to d from the real one (0 for
// the real time), at once and without a restart: the server's
// CLOCK_REALTIME, gettimeofday and time read the real clock plus d. Its
// monotonic clock does not move, so timers keep their pace; what moves is
// what Redis compares with wall-clock instants: key expiry, TIME, the
// absolute expiry times (PXAT) written to the AOF. The offset stays across
// Kill and Restart.
//
// It needs a bed started with Options.Clock; without, the error wraps
// errors.ErrUnsupported.
func (n *RedisNode) SetClockOffset(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: clock offset: %w", n.srv.name, err)
	}
	c := n.clock
	if c == nil {
		return fmt.Errorf("%s: clock offset: the bed was started without Options.Clock: %w", n.srv.name, errors.ErrUnsupported)
	}
	if err := c.write(offsetWall, d); err != nil {
		return fmt.Errorf("%s: clock offset: %w", n.srv.name, err)
	}
	return nil
}

// SetClockOffset moves the member's wall clock to d from the real one (0
// for the real time), at once and without a restart, like
// RedisNode.SetClockOffset. etcd is a Go program, which reads the time
// through the vDSO rather than the C library; the shim gives the member a
// vDSO of its own (see clockshim.c), so Go's time.Now reads the real wall
// clock plus d. The monotonic reading that time.Now carries does not move.
//
// What moves in etcd: the wall-clock times it reports (the Date header of
// its HTTP answers, its logs, the clock drift its peers' probes report),
// and the wall-clock deadline in its lease expiry queue. etcd revokes a
// lease only when both its wall and its monotonic clock say it expired, so
// a wall jump alone expires nothing early; AdvanceMonotonic is the other
// half. The offset stays across Kill and Restart.
//
// It needs a bed started with Options.Clock; without, the error wraps
// errors.ErrUnsupported.
func (n *EtcdNode) SetClockOffset(ctx context.Context, d time.Duration) error {
	if err := n.clockReady(ctx); err != nil {
		return fmt.Errorf("%s: clock offset: %w", n.srv.name, err)
	}
	if err := n.clock.write(offsetWall, d); err != nil {
		return fmt.Errorf("%s: clock offset: %w", n.srv.name, err)
	}
	return nil
}

// AdvanceMonotonic moves the member's monotonic clock (CLOCK_MONOTONIC and
// CLOCK_BOOTTIME) forward by d, at once: the member sees d more time pass
// than did, as after a suspended VM resumes. Jumps add up; the monotonic
// clock never goes back, so d must be positive.
//
// In etcd it moves what Go measures with the monotonic clock: lease time
// to live (LeaseTimeToLive on the leader reports d less) and timers (a
// timer due within d fires at once; a ticker, such as raft's, delivers one
// tick for the jump, not d's worth). A leader
// whose wall clock and monotonic clock both jumped past a lease's expiry
// revokes the lease at once (see SetClockOffset). The offset stays across
// Kill and Restart.
//
// It needs a bed started with Options.Clock; without, the error wraps
// errors.ErrUnsupported.
func (n *EtcdNode) AdvanceMonotonic(ctx context.Context, d time.Duration) error {
	if err := n.clockReady(ctx); err != nil {
		return fmt.Errorf("%s: advance monotonic: %w", n.srv.name, err)
	}
	if d <= 0 {
		return fmt.Errorf("%s: advance monotonic by %v: the monotonic clock only moves forward", n.srv.name, d)
	}
	n.clockMu.Lock()
	defer n.clockMu.Unlock()
	cur, err := n.clock.read(offsetMonotonic)
	if err == nil {
		err = n.clock.write(offsetMonotonic, cur+d)
	}
	if err != nil {
		return fmt.Errorf("%s: advance monotonic: %w", n.srv.name, err)
	}
	return nil
}

func (n *EtcdNode) clockReady(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if n.clock == nil {
		return fmt.Errorf("the bed was started without Options.Clock: %w", errors.ErrUnsupported)
	}
	return nil
}
