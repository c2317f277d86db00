package testbed

import (
	"context"
	_ "embed"
	"encoding/binary"
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
