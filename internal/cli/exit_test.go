package cli_test

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/quorumlock/quorumlock/internal/cli"
)

func TestExitCode(t *testing.T) {
	usage := cli.UsageError("bad %s", "flag")
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, cli.ExitOK},
		{"plain", io.EOF, cli.ExitFailure},
		{"usage", usage, cli.ExitUsage},
		{"wrapped usage", fmt.Errorf("ctx: %w", usage), cli.ExitUsage},
		{"explicit", cli.Exit(7, io.EOF), 7},
		{"outermost wins", cli.Exit(1, usage), cli.ExitFailure},
	} {
		if got := cli.ExitCode(tc.err); got != tc.want {
			t.Errorf("%s: ExitCode(%v) = %d, want %d", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestUsageErrorWraps(t *testing.T) {
	err := cli.UsageError("reading: %w", io.ErrUnexpectedEOF)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("UsageError does not wrap its %%w argument: %v", err)
	}
	if got, want := err.Error(), "reading: unexpected EOF"; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
}
