package benchkit

import (
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
)

// CPUProfile starts a CPU profile written to path, for go tool pprof, and
// returns the function that stops it and closes the file. An empty path
// profiles nothing.
func CPUProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		return nil, errors.Join(fmt.Errorf("cpu profile: %w", err), f.Close())
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}
