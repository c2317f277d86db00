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

// clockShimSource is the LD_PRELOAD library that moves a server's wall
// clock by the offset in its clock file; see the comment at its top.
//
//go:embed clockshim/clockshim.c
var clockShimSource string

// clockFileEnv names the environment variable that tells the shim where the
// node's clock file is.
const clockFileEnv = "QUORUMLOCK_CLOCK_FILE"

// clockFiles are the files of one node's clock, on this machine.
type clockFiles struct {
	shim   string // the shared library to preload
	offset string // the node's clock file: an int64 of nanoseconds
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

// newClockFiles creates a node's clock file in dir, with an offset of 0.
func newClockFiles(dir, shim string) (*clockFiles, error) {
	c := &clockFiles{shim: shim, offset: filepath.Join(dir, "clock-offset")}
	if err := os.WriteFile(c.offset, make([]byte, 8), 0o644); err != nil {
		return nil, fmt.Errorf("clock file: %w", err)
	}
	return c, nil
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
		return fmt.Errorf("%s: clock offset: %w", n.name, err)
	}
	c := n.cfg.clock
	if c == nil {
		return fmt.Errorf("%s: clock offset: the bed was started without Options.Clock: %w", n.name, errors.ErrUnsupported)
	}
	// The shim maps the file: it is written in place, never truncated or
	// replaced.
	f, err := os.OpenFile(c.offset, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("%s: clock offset: %w", n.name, err)
	}
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], uint64(d.Nanoseconds()))
	_, err = f.WriteAt(b[:], 0)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: clock offset: %w", n.name, err)
	}
	return nil
}
