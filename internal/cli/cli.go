// Package cli holds what the repository's cobra commands (quorumctl,
// quorumbed) share: one exit status convention (0 success, 1 failure, 2
// bad usage) carried by the error a command returns, the root command's
// common settings, the flag package's single-dash spelling, and a silent
// logger for go-redis.
//
// A command's main prints the error and exits with ExitCode(err):
//
//	err := run(ctx, args) // returns phase.Classify(root.ExecuteContext(ctx))
//	if err != nil {
//		fmt.Fprintln(os.Stderr, "tool:", err)
//		os.Exit(cli.ExitCode(err))
//	}
package cli
