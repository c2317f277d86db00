package testbed

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// resp encodes a command as Redis writes it to the AOF.
func resp(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

// writeAOF writes incremental files (named by index, seq 1, 2, ...) and
// their manifest into a new directory.
func writeAOF(t *testing.T, files ...string) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	manifest := "file appendonly.aof.1.base.rdb seq 1 type b\n"
	var paths []string
	for i, f := range files {
		name := fmt.Sprintf("appendonly.aof.%d.incr.aof", i+1)
		manifest += fmt.Sprintf("file %s seq %d type i\n", name, i+1)
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	if err := os.WriteFile(filepath.Join(dir, aofManifest), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, paths
}

func readString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCutAOFTail(t *testing.T) {
	sel := resp("SELECT", "0")
	a := resp("SET", "a", "1")
	tx := resp("MULTI") + resp("SET", "b", "2") + resp("SET", "c", "3") + resp("EXEC")
	d := resp("set", "d", "with\r\nCRLF inside")
	torn := resp("SET", "e", "5")[:9]
	file := sel + a + tx + d + torn
	for _, tc := range []struct {
		n, cut int
		left   string
	}{
		{0, 0, file},
		{1, 1, sel + a + tx},
		{2, 2, sel + a},
		{3, 3, sel},
		{10, 3, sel},
	} {
		dir, paths := writeAOF(t, file)
		cut, err := cutAOFTail(dir, tc.n)
		if err != nil {
			t.Fatalf("cut %d: %v", tc.n, err)
		}
		if cut != tc.cut {
			t.Errorf("cut %d: cut %d commands, want %d", tc.n, cut, tc.cut)
		}
		if got := readString(t, paths[0]); got != tc.left {
			t.Errorf("cut %d: left %q, want %q", tc.n, got, tc.left)
		}
	}
}

func TestCutAOFTailAcrossFiles(t *testing.T) {
	sel := resp("SELECT", "0")
	old := sel + resp("SET", "a", "1") + resp("SET", "b", "2")
	newer := sel + resp("SET", "c", "3")
	dir, paths := writeAOF(t, old, newer)
	cut, err := cutAOFTail(dir, 2)
	if err != nil {
		t.Fatal(err)
	}
	if cut != 2 {
		t.Fatalf("cut %d, want 2", cut)
	}
	if got, want := readString(t, paths[0]), sel+resp("SET", "a", "1"); got != want {
		t.Errorf("older file: %q, want %q", got, want)
	}
	if got := readString(t, paths[1]); got != sel {
		t.Errorf("newer file: %q, want only its SELECT", got)
	}
}

func TestCutAOFTailTornTransaction(t *testing.T) {
	sel := resp("SELECT", "0")
	a := resp("SET", "a", "1")
	file := sel + a + resp("MULTI") + resp("SET", "b", "2")
	dir, paths := writeAOF(t, file)
	cut, err := cutAOFTail(dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := readString(t, paths[0]); cut != 1 || got != sel {
		t.Fatalf("cut %d, left %q; want 1 (SET a, the open MULTI going as a torn write), and the SELECT", cut, got)
	}
}

func TestCutAOFTailRejectsGarbage(t *testing.T) {
	for _, bad := range []string{
		resp("SET", "a", "1") + "hello\r\n",
		"*2\r\n$3\r\nGET\r\n$1\r\nabc\r\n",
		"*x\r\n",
		"*0\r\n",
	} {
		dir, paths := writeAOF(t, bad)
		if _, err := cutAOFTail(dir, 1); err == nil {
			t.Errorf("%q: no error", bad)
		}
		if got := readString(t, paths[0]); got != bad {
			t.Errorf("%q: the file was changed to %q", bad, got)
		}
	}
	if _, err := cutAOFTail(t.TempDir(), 1); err == nil {
		t.Error("no manifest: no error")
	}
}

// Every prefix of a valid AOF is a valid AOF with a torn tail: cutting
// never errs, and always stops at a command boundary.
func TestCutAOFTailEveryPrefix(t *testing.T) {
	cmds := []string{resp("SELECT", "0"), resp("SET", "k", "v"), resp("MULTI"), resp("INCR", "n"), resp("EXEC"), resp("DEL", "k")}
	file := strings.Join(cmds, "")
	var bounds []int
	off := 0
	for _, c := range cmds {
		bounds = append(bounds, off)
		off += len(c)
	}
	bounds = append(bounds, off)
	for i := 0; i <= len(file); i++ {
		dir, paths := writeAOF(t, file[:i])
		if _, err := cutAOFTail(dir, 1); err != nil {
			t.Fatalf("prefix %d: %v", i, err)
		}
		left := len(readString(t, paths[0]))
		ok := false
		for _, b := range bounds {
			ok = ok || b == left
		}
		if !ok || left > i {
			t.Fatalf("prefix %d: cut to %d, not a command boundary", i, left)
		}
	}
}

func TestClockShimNeedsCompiler(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := buildClockShim(t.Context(), t.TempDir())
	if !errors.Is(err, exec.ErrNotFound) || !strings.Contains(err.Error(), "C compiler") {
		t.Fatalf("no compiler on PATH: %v", err)
	}
}

// The shim needs no library: it loads into any glibc, the container's as
// well as this machine's, and takes only two unversioned symbols from it.
func TestClockShimHasNoDependencies(t *testing.T) {
	so, err := buildClockShim(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(so)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	if err != nil || len(libs) != 0 {
		t.Errorf("needed libraries: %v, %v; want none", libs, err)
	}
	syms, err := f.ImportedSymbols()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range syms {
		if s.Version != "" {
			t.Errorf("imported symbol %s needs version %s", s.Name, s.Version)
		}
		names = append(names, s.Name)
	}
	sort.Strings(names)
	if got := strings.Join(names, ","); got != "__errno_location,environ" {
		t.Errorf("imported symbols: %s", got)
	}
	dyn, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, s := range dyn {
		if s.Section != elf.SHN_UNDEF {
			exported[s.Name] = true
		}
	}
	for _, name := range []string{"clock_gettime", "gettimeofday", "time"} {
		if !exported[name] {
			t.Errorf("the shim does not define %s", name)
		}
	}
}
