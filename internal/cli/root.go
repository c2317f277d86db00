package cli

import (
	"io"

	"github.com/spf13/cobra"
)

// SetupRoot gives root the settings every command tree of the repository
// shares: its streams; no usage text and no error printed by cobra (main
// prints the error once); a flag error that is a UsageError naming the
// command's --help; and, when root has no RunE of its own, one that takes
// no arguments, prints the help to stderr and returns a UsageError, so
// that a bare invocation exits with ExitUsage.
func SetupRoot(root *cobra.Command, stdin io.Reader, stdout, stderr io.Writer) {
	root.SilenceUsage = true
	root.SilenceErrors = true
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return UsageError("%w (see '%s --help')", err, cmd.CommandPath())
	})
	if root.RunE != nil || root.Run != nil {
		return
	}
	root.Args = cobra.NoArgs
	root.RunE = func(cmd *cobra.Command, _ []string) error {
		cmd.SetOut(stderr)
		_ = cmd.Help()
		return UsageError("no command given")
	}
}
