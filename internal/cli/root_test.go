package cli_test

import (
	"context"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/quorumlock/quorumlock/internal/cli"
)

// execute runs a tool with one subcommand "do" (a --n int flag) and args.
func execute(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root := &cobra.Command{Use: "tool"}
	var out, errOut strings.Builder
	cli.SetupRoot(root, strings.NewReader(""), &out, &errOut)
	var p cli.Phase
	do := &cobra.Command{Use: "do", Args: cobra.NoArgs, RunE: p.RunE(func(cmd *cobra.Command, _ []string) error {
		cmd.Print("done")
		return nil
	})}
	do.Flags().Int("n", 0, "")
	root.AddCommand(do)
	root.SetArgs(args)
	err = p.Classify(root.ExecuteContext(context.Background()))
	return out.String(), errOut.String(), err
}

func TestSetupRoot(t *testing.T) {
	out, errOut, err := execute(t)
	if cli.ExitCode(err) != cli.ExitUsage || !strings.Contains(err.Error(), "no command given") {
		t.Fatalf("bare invocation: %v (exit %d), want a usage error", err, cli.ExitCode(err))
	}
	if out != "" || !strings.Contains(errOut, "Usage:") {
		t.Fatalf("bare invocation: stdout %q, stderr %q; want the help on stderr only", out, errOut)
	}
	_, _, err = execute(t, "do", "--n", "x")
	if cli.ExitCode(err) != cli.ExitUsage || !strings.Contains(err.Error(), "see 'tool do --help'") {
		t.Fatalf("bad flag: %v (exit %d), want a usage error naming --help", err, cli.ExitCode(err))
	}
	out, errOut, err = execute(t, "do")
	if err != nil || out != "done" || errOut != "" {
		t.Fatalf("do: %v, stdout %q, stderr %q", err, out, errOut)
	}
}

func TestSetupRootKeepsRunE(t *testing.T) {
	root := &cobra.Command{Use: "tool", RunE: func(*cobra.Command, []string) error { return nil }}
	cli.SetupRoot(root, strings.NewReader(""), &strings.Builder{}, &strings.Builder{})
	root.SetArgs(nil)
	if err := root.Execute(); err != nil {
		t.Fatalf("a root with its own RunE: %v", err)
	}
}
