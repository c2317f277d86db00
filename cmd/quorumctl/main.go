// Command quorumctl answers an on-call engineer's questions about a running
// quorumlock deployment. It is the binary to copy to production hosts: it
// links neither the test bed nor the testing package nor a Docker client
// (TestNoTestDependencies keeps it so). The test bed and the seed demo are
// devtools/cmd/quorumbed's.
//
//	quorumctl trust --addrs A,B,...   vouch for brand-new Redis masters to the lock's
//	                                  restart guard, until each one's next restart
//
// The other commands, configured like ordersd (ORDERS_REDIS_ADDRS,
// ORDERS_DATABASE_URL or ORDERS_DATABASE_URL_FILE, ORDERS_REDIS_USERNAME,
// ORDERS_REDIS_PASSWORD or ORDERS_REDIS_PASSWORD_FILE, ORDERS_REDIS_TLS,
// ORDERS_REDIS_TLS_CA_FILE, ORDERS_REDIS_DURABLE, ORDERS_LOCK_TTL,
// ORDERS_NODE_TIMEOUT), each overridable by a flag (--redis, --database-url,
// ...):
//
//	quorumctl status             every node: reachable, latency, version, uptime, may it vote now
//	quorumctl inspect KEY        the value digest and PTTL of KEY on every node, and its majority holder
//	quorumctl lock KEY [--ttl D] [--hold D] [--wait D]   take KEY through quorum.Locker
//	quorumctl unlock KEY --token T   compare-and-delete KEY on every node
//	quorumctl fence KEY          the current fence of KEY in fence_counters
//	quorumctl invariants         run store.CheckInvariants once; exit status 1 on a violation
//
// Every operator command prints a table, or JSON with -o json. Tokens are
// shown as a short digest (the first 8 hex digits of their SHA-256), never
// in full, except once by `lock --hold 0`, which keeps the lock and must hand
// its token to the operator. The database password is never printed.
//
// Exit status: 0 on success, 1 when the command failed or found a problem
// (an unhealthy cluster, a violation, nothing released), 2 on bad usage.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/quorumlock/quorumlock/internal/cliflags"
)

func main() {
	// go-redis logs every failed dial on its own; the commands report an
	// unreachable node themselves.
	redis.SetLogger(quietLogger{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.LookupEnv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "quorumctl:", err)
		os.Exit(exitCode(err))
	}
}

// quietLogger drops go-redis's log lines.
type quietLogger struct{}

// Printf does nothing.
func (quietLogger) Printf(context.Context, string, ...any) {}

// app is the state of one invocation: its streams, its environment, and
// the secrets it read, which no error it returns may contain.
type app struct {
	env            func(string) (string, bool)
	stdin          io.Reader
	stdout, stderr io.Writer
	secrets        []string
	started        bool // a command's RunE began: later errors are not usage errors
}

// run executes the command line args and returns its error, with every
// secret the invocation read replaced by xxxxx.
func run(ctx context.Context, args []string, env func(string) (string, bool), stdin io.Reader, stdout, stderr io.Writer) error {
	a := &app{env: env, stdin: stdin, stdout: stdout, stderr: stderr}
	root := a.rootCmd()
	root.SetArgs(cliflags.Normalize(root, args))
	err := root.ExecuteContext(ctx)
	if err == nil {
		return nil
	}
	var ee *exitError
	if !errors.As(err, &ee) {
		code := 1
		if !a.started {
			code = 2
		}
		err = &exitError{code: code, err: err}
	}
	return a.redact(err)
}

// exitError carries the exit status of an error.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageError is bad usage (exit status 2).
func usageError(format string, args ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, args...)}
}

// exitCode is the exit status for err: 1 unless it says otherwise.
func exitCode(err error) int {
	var re *redactedError
	if errors.As(err, &re) {
		return re.code
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

// redactedError is an error whose message had the secrets taken out. It
// keeps the exit status of the original, but not the original itself.
type redactedError struct {
	msg  string
	code int
}

func (e *redactedError) Error() string { return e.msg }

// redact returns err with every secret of the invocation replaced by xxxxx.
func (a *app) redact(err error) error {
	return &redactedError{msg: a.scrub(err.Error()), code: exitCode(err)}
}

func (a *app) scrub(s string) string {
	for _, sec := range a.secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, "xxxxx")
		}
	}
	return s
}

// addSecret records a secret that must never appear in an error.
func (a *app) addSecret(s string) {
	if s != "" {
		a.secrets = append(a.secrets, s)
	}
}

// rootCmd builds the command tree of one invocation.
func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "quorumctl",
		Short: "Inspect a running quorumlock deployment",
		Long: `quorumctl answers an on-call engineer's questions about a running
quorumlock deployment (status, inspect, lock, unlock, fence, invariants) and
vouches for brand-new Redis masters to the lock's restart guard (trust). The
test bed and the seed demo are quorumbed's (go run ./devtools/cmd/quorumbed).

The operator commands read ordersd's configuration: ORDERS_REDIS_ADDRS,
ORDERS_DATABASE_URL (or ORDERS_DATABASE_URL_FILE), ORDERS_REDIS_USERNAME,
ORDERS_REDIS_PASSWORD (or ORDERS_REDIS_PASSWORD_FILE), ORDERS_REDIS_TLS,
ORDERS_REDIS_TLS_CA_FILE, ORDERS_REDIS_DURABLE, ORDERS_LOCK_TTL and
ORDERS_NODE_TIMEOUT; a flag overrides its variable. Tokens are shown as a
short digest (the first 8 hex digits of their SHA-256): the full token is
printed only by 'lock --hold 0', once.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.SetOut(a.stderr)
			_ = cmd.Help()
			return usageError("no command given")
		},
	}
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageError("%w (see '%s --help')", err, cmd.CommandPath())
	})
	root.AddCommand(movedCmd("demo"), movedCmd("bed"), a.trustCmd(),
		a.statusCmd(), a.inspectCmd(), a.lockCmd(), a.unlockCmd(), a.fenceCmd(), a.invariantsCmd())
	return root
}

// runE marks the start of a command's own work, so that the errors it
// returns count as failures, not as bad usage.
func (a *app) runE(fn func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		a.started = true
		return fn(cmd, args)
	}
}

// keyArg checks that a command got exactly one non-empty KEY.
func keyArg(cmd *cobra.Command, args []string) error {
	switch {
	case len(args) == 0:
		return usageError("missing KEY: usage: %s", cmd.UseLine())
	case len(args) > 1:
		return usageError("want one KEY, got %d arguments: usage: %s", len(args), cmd.UseLine())
	case args[0] == "":
		return usageError("KEY is empty")
	}
	return nil
}
