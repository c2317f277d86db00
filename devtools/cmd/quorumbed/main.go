// Command quorumbed starts a test bed of five Redis masters and Postgres,
// and runs the seed demo on it. It is a development tool: it links the test
// bed and, through the docker provider, testcontainers-go (which imports
// testing) and a Docker client, so it is not the tool to copy to production
// hosts; that is quorumctl, which the demo runs for its operator's view.
//
//	quorumbed demo [--ordersd PATH] [--quorumctl PATH]
//	    start five Redis masters and Postgres, show each answering, run the
//	    seed scenario against three ordersd processes, show the operator's
//	    view (metrics, quorumctl status, inspect and invariants), stop
//	quorumbed demo --ha [--ordersd PATH]
//	    start five Redis masters and a Postgres HA group, run the
//	    double-click story with the primary killed in its middle, stop
//	quorumbed bed [--redis N] [--hold]
//	    start a bed, print its addresses as environment lines; with --hold
//	    keep it up until interrupted
//
// The bed's provider is chosen by QUORUMLOCK_TESTBED (docker, local or
// auto). The flag package's single-dash spelling (-ordersd PATH, -hold)
// works as well.
//
// Exit status: 0 on success, 1 when the command failed, 2 on bad usage
// (such as an ordersd or quorumctl binary that cannot be found).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/quorumlock/quorumlock/internal/cli"
)

func main() {
	// go-redis logs every failed dial on its own; the commands report an
	// unreachable node themselves.
	redis.SetLogger(cli.QuietLogger{})
	quietDocker()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Environ(), os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "quorumbed:", err)
		os.Exit(cli.ExitCode(err))
	}
}

// app is the state of one invocation: its streams and the environment the
// processes it starts inherit.
type app struct {
	env            []string // KEY=value, as os.Environ returns them
	stdin          io.Reader
	stdout, stderr io.Writer
	phase          cli.Phase // a command's RunE began: later errors are not usage errors
}

// run executes the command line args and returns its error. env is the
// environment the demo's ordersd and quorumctl processes inherit (before
// the bed's ORDERS_* settings, which win); the bed's provider reads
// QUORUMLOCK_* from the environment of this process.
func run(ctx context.Context, args, env []string, stdin io.Reader, stdout, stderr io.Writer) error {
	a := &app{env: env, stdin: stdin, stdout: stdout, stderr: stderr}
	root := a.rootCmd()
	root.SetArgs(cli.Normalize(root, args))
	return a.phase.Classify(root.ExecuteContext(ctx))
}

// rootCmd builds the command tree of one invocation.
func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "quorumbed",
		Short: "Start a test bed of five masters and Postgres, and run the seed demo on it",
		Long: `quorumbed starts a quorumlock test bed of Redis masters and Postgres (bed),
and runs the seed demo on one (demo): three ordersd processes, the
double-click scenario, a payment, then the operator's view through the
quorumctl binary.

The bed's provider is chosen by QUORUMLOCK_TESTBED (docker, local or auto).
quorumbed links the test bed and a Docker client: it is not for production
hosts. The operator's tool is quorumctl.`,
	}
	cli.SetupRoot(root, a.stdin, a.stdout, a.stderr)
	root.AddCommand(a.demoCmd(), a.bedCmd())
	return root
}

func (a *app) demoCmd() *cobra.Command {
	var ordersd, quorumctl, shipper string
	var ha bool
	cmd := &cobra.Command{
		Use:   "demo [--ha] [--ordersd PATH] [--quorumctl PATH] [--shipper PATH]",
		Short: "Start a bed and run the seed scenario against three ordersd processes",
		Long: `demo starts five Redis masters and Postgres, shows each answering, runs the
seed scenario (three identical requests for the last unit on three ordersd
instances, then a payment whose first reply is lost, then the paid order's
event delivered twice to a shipper, which ships it once), shows the operator's
view (every instance's key metrics, then quorumctl status, inspect stock:42
and invariants, run as a separate process with ordersd's environment) and
stops the bed.

ordersd is --ordersd, else bin/ordersd, else ordersd on PATH. quorumctl is
--quorumctl, else the quorumctl next to that ordersd, else bin/quorumctl,
else quorumctl on PATH; shipper likewise.

With --ha the bed's Postgres is a pg_auto_failover group (a monitor, a
primary and a synchronous standby; local processes only, pg_autoctl
needed) and the story is the double-click's alone, on three ordersd on the
group's multi-host URI: one double-click, then a second during which the
primary is killed (SIGKILL) with the order waiting inside it; what the
clients see until the standby is promoted (503 with Retry-After), the
monitor's events, /readyz naming the new primary, the old primary back as
a standby that refuses writes, the audit and the timings. Only ordersd is
needed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ordersdPath, err := findOrdersd(ordersd)
			if err != nil {
				return cli.UsageError("%w", err)
			}
			if ha {
				a.phase.Begin()
				return demoHA(cmd.Context(), ordersdPath, a.env, a.stdout)
			}
			quorumctlPath, err := findQuorumctl(quorumctl, ordersdPath)
			if err != nil {
				return cli.UsageError("%w", err)
			}
			shipperPath, err := findShipper(shipper, ordersdPath)
			if err != nil {
				return cli.UsageError("%w", err)
			}
			a.phase.Begin()
			return demo(cmd.Context(), demoBins{ordersd: ordersdPath, quorumctl: quorumctlPath, shipper: shipperPath}, a.env, a.stdout)
		},
	}
	cmd.Flags().BoolVar(&ha, "ha", false, "run the double-click story on a Postgres HA group, killing the primary in its middle")
	cmd.Flags().StringVar(&ordersd, "ordersd", "", "path of the ordersd binary (default bin/ordersd, then PATH)")
	cmd.Flags().StringVar(&quorumctl, "quorumctl", "", "path of the quorumctl binary (default next to ordersd, then bin/quorumctl, then PATH)")
	cmd.Flags().StringVar(&shipper, "shipper", "", "path of the shipper binary (default next to ordersd, then bin/shipper, then PATH)")
	return cmd
}

func (a *app) bedCmd() *cobra.Command {
	var n int
	var hold bool
	cmd := &cobra.Command{
		Use:   "bed [--redis N] [--hold]",
		Short: "Start a bed and print its addresses as environment lines",
		Args:  cobra.NoArgs,
		RunE: a.phase.RunE(func(cmd *cobra.Command, _ []string) error {
			return bed(cmd.Context(), n, hold, a.stdout)
		}),
	}
	cmd.Flags().IntVar(&n, "redis", 5, "number of Redis masters")
	cmd.Flags().BoolVar(&hold, "hold", false, "keep the bed up until interrupted")
	return cmd
}
