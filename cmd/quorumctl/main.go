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
//	quorumctl semaphore NAME [--release I --token T]   a semaphore's count and permit holders; release a permit
//	quorumctl rwlock NAME [--release-writer | --release-reader I] [--token T]   a read-write lock's writer, waiting writer, readers
//	quorumctl election NAME [--resign --token T]   an election's leader lease, leader record, last leaders
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

	"github.com/quorumlock/quorumlock/internal/cli"
)

func main() {
	// go-redis logs every failed dial on its own; the commands report an
	// unreachable node themselves.
	redis.SetLogger(cli.QuietLogger{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.LookupEnv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "quorumctl:", err)
		os.Exit(cli.ExitCode(err))
	}
}

// app is the state of one invocation: its streams, its environment, and
// the secrets it read, which no error it returns may contain.
type app struct {
	env            func(string) (string, bool)
	stdin          io.Reader
	stdout, stderr io.Writer
	secrets        []string
	phase          cli.Phase // a command's RunE began: later errors are not usage errors
}

// run executes the command line args and returns its error, with every
// secret the invocation read replaced by xxxxx.
func run(ctx context.Context, args []string, env func(string) (string, bool), stdin io.Reader, stdout, stderr io.Writer) error {
	a := &app{env: env, stdin: stdin, stdout: stdout, stderr: stderr}
	root := a.rootCmd()
	root.SetArgs(cli.Normalize(root, args))
	err := a.phase.Classify(root.ExecuteContext(ctx))
	if err == nil {
		return nil
	}
	return a.redact(err)
}

// redact returns err with every secret of the invocation replaced by
// xxxxx. It keeps the exit status of err, but not err itself.
func (a *app) redact(err error) error {
	return cli.Exit(cli.ExitCode(err), errors.New(a.scrub(err.Error())))
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
quorumlock deployment (status, inspect, lock, unlock, semaphore, rwlock,
election, fence, invariants) and vouches for brand-new Redis masters to the
lock's restart guard (trust). The test bed and the seed demo are quorumbed's
(go run ./devtools/cmd/quorumbed).

The operator commands read ordersd's configuration: ORDERS_REDIS_ADDRS,
ORDERS_DATABASE_URL (or ORDERS_DATABASE_URL_FILE), ORDERS_REDIS_USERNAME,
ORDERS_REDIS_PASSWORD (or ORDERS_REDIS_PASSWORD_FILE), ORDERS_REDIS_TLS,
ORDERS_REDIS_TLS_CA_FILE, ORDERS_REDIS_DURABLE, ORDERS_LOCK_TTL and
ORDERS_NODE_TIMEOUT; a flag overrides its variable. Tokens are shown as a
short digest (the first 8 hex digits of their SHA-256): the full token is
printed only by 'lock --hold 0', once.`,
	}
	cli.SetupRoot(root, a.stdin, a.stdout, a.stderr)
	root.AddCommand(movedCmd("demo"), movedCmd("bed"), a.trustCmd(),
		a.statusCmd(), a.inspectCmd(), a.lockCmd(), a.unlockCmd(),
		a.semaphoreCmd(), a.rwlockCmd(), a.electionCmd(), a.fenceCmd(), a.invariantsCmd())
	return root
}

// keyArg checks that a command got exactly one non-empty KEY.
func keyArg(cmd *cobra.Command, args []string) error {
	switch {
	case len(args) == 0:
		return cli.UsageError("missing KEY: usage: %s", cmd.UseLine())
	case len(args) > 1:
		return cli.UsageError("want one KEY, got %d arguments: usage: %s", len(args), cmd.UseLine())
	case args[0] == "":
		return cli.UsageError("KEY is empty")
	}
	return nil
}
