package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// Phase records whether a command's own work has begun. An error that
// comes before it (from cobra's parsing or a command's argument checks) is
// bad usage; one that comes after is a failure. The zero Phase has not
// begun; a Phase serves one invocation.
type Phase struct {
	begun bool
}

// Begin marks the start of the command's own work.
func (p *Phase) Begin() { p.begun = true }

// RunE wraps a cobra RunE so that it calls Begin first.
func (p *Phase) RunE(fn func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		p.Begin()
		return fn(cmd, args)
	}
}

// Classify gives err an exit status unless its chain carries one: ExitFailure
// once the work has begun, ExitUsage before. Nil stays nil.
func (p *Phase) Classify(err error) error {
	if err == nil {
		return nil
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return err
	}
	code := ExitUsage
	if p.begun {
		code = ExitFailure
	}
	return Exit(code, err)
}
