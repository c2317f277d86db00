package cli

import (
	"errors"
	"fmt"
)

// The exit statuses of the repository's commands.
const (
	// ExitOK is success.
	ExitOK = 0
	// ExitFailure is a command that failed or found a problem.
	ExitFailure = 1
	// ExitUsage is bad usage: an unknown flag, a missing argument, a
	// binary that cannot be found.
	ExitUsage = 2
)

// ExitError is an error that carries the exit status of the process that
// returns it.
type ExitError struct {
	Code int   // the exit status
	Err  error // what went wrong
}

// Error is the message of the wrapped error.
func (e *ExitError) Error() string { return e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *ExitError) Unwrap() error { return e.Err }

// Exit returns err with the exit status code.
func Exit(code int, err error) error {
	return &ExitError{Code: code, Err: err}
}

// UsageError is bad usage (ExitUsage), its message formatted by
// fmt.Errorf, so that %w wraps.
func UsageError(format string, args ...any) error {
	return Exit(ExitUsage, fmt.Errorf(format, args...))
}

// ExitCode is the exit status for err: ExitOK for nil, the code of the
// outermost ExitError in its chain, else ExitFailure.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	return ExitFailure
}
