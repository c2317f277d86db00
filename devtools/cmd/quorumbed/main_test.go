package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/cli"
)

func TestMain(m *testing.M) {
	redis.SetLogger(cli.QuietLogger{}) // as main does
	os.Exit(m.Run())
}

// result is one quorumbed invocation.
type result struct {
	args           []string
	stdout, stderr string
	err            error
}

func (r result) code() int {
	if r.err == nil {
		return 0
	}
	return cli.ExitCode(r.err)
}

// bedcmd runs quorumbed with args and no environment for the processes it
// starts.
func bedcmd(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut strings.Builder
	err := run(ctx, args, nil, strings.NewReader(""), &out, &errOut)
	return result{args: args, stdout: out.String(), stderr: errOut.String(), err: err}
}

// wantCode fails t unless r exited with code and its error mentions msg.
func wantCode(t *testing.T, r result, code int, msg string) {
	t.Helper()
	if got := r.code(); got != code {
		t.Fatalf("quorumbed %q: exit status %d, want %d\nstdout:\n%s\nerror: %v", r.args, got, code, r.stdout, r.err)
	}
	if msg != "" && (r.err == nil || !strings.Contains(r.err.Error(), msg)) {
		t.Fatalf("quorumbed %q: error %v, want it to mention %q", r.args, r.err, msg)
	}
}

// writeFakeBin writes an executable file name into dir and returns its path.
func writeFakeBin(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// Usage errors: exit status 2, a message that says what is wrong, nothing
// on stdout, and no bed started. The commands keep the spelling they had
// in quorumctl.
func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	fakeOrdersd := writeFakeBin(t, dir, "ordersd")
	fakeCtl := writeFakeBin(t, dir, "quorumctl")
	lone := writeFakeBin(t, t.TempDir(), "ordersd") // no quorumctl next to it
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{nil, "no command given"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"status"}, `unknown command "status"`}, // an operator command: quorumctl's
		{[]string{"bed", "-redis", "x"}, `invalid argument "x" for "--redis"`},
		{[]string{"bed", "extra"}, `unknown command "extra"`},
		{[]string{"demo", "-ordersd", "/nonexistent/ordersd"}, "-ordersd /nonexistent/ordersd: not an executable file"},
		{[]string{"demo", "-ordersd", fakeOrdersd, "extra"}, `unknown command "extra"`},
		{[]string{"demo", "-ha", "-ordersd", "/nonexistent/ordersd"}, "-ordersd /nonexistent/ordersd: not an executable file"},
		{[]string{"demo", "--ha=maybe", "-ordersd", fakeOrdersd}, `invalid argument "maybe" for "--ha"`},
		{[]string{"demo", "-ordersd", fakeOrdersd, "-quorumctl", "/nonexistent/quorumctl"}, "-quorumctl /nonexistent/quorumctl: not an executable file"},
		{[]string{"demo", "-ordersd", fakeOrdersd, "-quorumctl", dir}, "-quorumctl " + dir + ": not an executable file"},
		{[]string{"demo", "-ordersd", fakeOrdersd, "-quorumctl", fakeCtl, "--nosuchflag"}, "unknown flag: --nosuchflag"},
	} {
		r := bedcmd(t, tc.args...)
		wantCode(t, r, 2, tc.msg)
		if r.stdout != "" {
			t.Errorf("quorumbed %q printed on stdout: %q", tc.args, r.stdout)
		}
	}
	// With no quorumctl next to ordersd, in bin/ or on PATH, the demo says
	// how to build one before it starts a bed.
	t.Chdir(t.TempDir())
	t.Setenv("PATH", t.TempDir())
	wantCode(t, bedcmd(t, "demo", "-ordersd", lone), 2, "quorumctl binary not found: run `go build -o bin/quorumctl ./cmd/quorumctl` or pass -quorumctl")
	wantCode(t, bedcmd(t, "demo"), 2, "ordersd binary not found")
}

func TestNormalizeArgs(t *testing.T) {
	root := (&app{}).rootCmd()
	for _, tc := range []struct{ in, want []string }{
		{[]string{"demo", "-ordersd", "bin/ordersd"}, []string{"demo", "--ordersd", "bin/ordersd"}},
		{[]string{"demo", "-ordersd=bin/ordersd"}, []string{"demo", "--ordersd=bin/ordersd"}},
		{[]string{"demo", "-ordersd", "bin/ordersd", "-quorumctl", "bin/quorumctl"}, []string{"demo", "--ordersd", "bin/ordersd", "--quorumctl", "bin/quorumctl"}},
		{[]string{"demo", "--ordersd", "-quorumctl"}, []string{"demo", "--ordersd", "-quorumctl"}}, // a value is never rewritten
		{[]string{"demo", "-ha", "-ordersd", "bin/ordersd"}, []string{"demo", "--ha", "--ordersd", "bin/ordersd"}},
		{[]string{"bed", "-redis", "3", "-hold"}, []string{"bed", "--redis", "3", "--hold"}},
		{[]string{"bed", "--", "-hold"}, []string{"bed", "--", "-hold"}},
		{[]string{"bed", "-nosuchflag"}, []string{"bed", "-nosuchflag"}},
	} {
		if got := cli.Normalize(root, tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("Normalize(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestFindOrdersd(t *testing.T) {
	dir := t.TempDir()
	bin := writeFakeBin(t, dir, "ordersd")
	got, err := findOrdersd(bin)
	if err != nil || got != bin {
		t.Fatalf("findOrdersd(%q) = %q, %v", bin, got, err)
	}
}

// quorumctl is the flag, then the one next to ordersd, then bin/quorumctl,
// then the one on PATH.
func TestFindQuorumctl(t *testing.T) {
	flagged := writeFakeBin(t, t.TempDir(), "quorumctl")
	pair := t.TempDir()
	ordersd := writeFakeBin(t, pair, "ordersd")
	beside := writeFakeBin(t, pair, "quorumctl")
	lone := writeFakeBin(t, t.TempDir(), "ordersd")
	work := t.TempDir()
	if err := os.Mkdir(filepath.Join(work, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	inBin := writeFakeBin(t, filepath.Join(work, "bin"), "quorumctl")
	onPath := t.TempDir()
	pathBin := writeFakeBin(t, onPath, "quorumctl")
	t.Setenv("PATH", onPath)
	t.Chdir(work)

	for _, tc := range []struct {
		flag, ordersd, want string
	}{
		{flagged, ordersd, flagged},
		{"", ordersd, beside},
		{"", lone, inBin},
		{"", "", inBin},
	} {
		if got, err := findQuorumctl(tc.flag, tc.ordersd); err != nil || got != tc.want {
			t.Errorf("findQuorumctl(%q, %q) = %q, %v; want %q", tc.flag, tc.ordersd, got, err, tc.want)
		}
	}
	if err := os.Remove(inBin); err != nil {
		t.Fatal(err)
	}
	if got, err := findQuorumctl("", lone); err != nil || got != pathBin {
		t.Errorf("findQuorumctl without bin/quorumctl = %q, %v; want %q from PATH", got, err, pathBin)
	}
}

func TestInfoField(t *testing.T) {
	info := "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n"
	if v := infoField(info, "redis_version"); v != "7.0.15" {
		t.Fatalf("got %q", v)
	}
	if v := infoField(info, "missing"); v != "?" {
		t.Fatalf("got %q", v)
	}
}

// bed, in the earlier spelling, prints the addresses of a bed it starts
// and stops.
func TestBedCommand(t *testing.T) {
	r := bedcmd(t, "bed", "-redis", "1")
	wantCode(t, r, 0, "")
	for _, want := range []string{"QUORUMLOCK_PROVIDER=", "ORDERS_REDIS_ADDRS=127.0.0.1:", "ORDERS_DATABASE_URL=postgres://"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("bed output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, ",") {
		t.Errorf("bed -redis 1 printed more than one master:\n%s", r.stdout)
	}
}

// The quorumbed binary prints no library banner: testcontainers-go
// announces itself (engine version, session and process ids) the first
// time a process reaches the engine, and quorumbed silences it. On the
// local provider there is no banner to silence; make test runs this on the
// docker provider.
func TestNoLibraryBanner(t *testing.T) {
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build quorumbed: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "quorumbed")
	if out, err := exec.Command(gocmd, "build", "-o", bin, "github.com/quorumlock/quorumlock/devtools/cmd/quorumbed").CombinedOutput(); err != nil {
		t.Fatalf("go build ./devtools/cmd/quorumbed: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "bed", "-redis", "1").CombinedOutput()
	if err != nil {
		t.Fatalf("quorumbed bed: %v\n%s", err, out)
	}
	t.Logf("quorumbed bed:\n%s", out)
	for _, banner := range []string{"Testcontainers", "SessionID", "Connected to docker"} {
		if strings.Contains(string(out), banner) {
			t.Errorf("quorumbed printed the library's banner (%q):\n%s", banner, out)
		}
	}
}
