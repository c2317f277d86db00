package benchkit

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCPUProfileWritesAProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.prof")
	stop, err := CPUProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 1e6; i++ {
		_ = i * i
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Fatalf("no profile written: %v", err)
	}
	stop, err = CPUProfile("")
	if err != nil || stop() != nil {
		t.Fatalf("an empty path: %v", err)
	}
	if _, err := CPUProfile(filepath.Join(t.TempDir(), "missing", "cpu.prof")); err == nil {
		t.Fatal("a profile in a missing directory was started")
	}
}
