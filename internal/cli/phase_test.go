package cli_test

import (
	"fmt"
	"io"
	"testing"

	"github.com/spf13/cobra"

	"github.com/quorumlock/quorumlock/internal/cli"
)

func TestPhaseClassify(t *testing.T) {
	var p cli.Phase
	if err := p.Classify(nil); err != nil {
		t.Fatalf("Classify(nil) = %v", err)
	}
	if got := cli.ExitCode(p.Classify(io.EOF)); got != cli.ExitUsage {
		t.Fatalf("before Begin: exit %d, want %d", got, cli.ExitUsage)
	}
	p.Begin()
	if got := cli.ExitCode(p.Classify(io.EOF)); got != cli.ExitFailure {
		t.Fatalf("after Begin: exit %d, want %d", got, cli.ExitFailure)
	}
	if got := cli.ExitCode(p.Classify(cli.UsageError("late"))); got != cli.ExitUsage {
		t.Fatalf("a carried status must stay: exit %d, want %d", got, cli.ExitUsage)
	}
	wrapped := fmt.Errorf("flag: %w", cli.UsageError("late"))
	if got := p.Classify(wrapped); got != wrapped {
		t.Fatalf("an error whose chain carries a status must come back as it is: %v", got)
	}
}

func TestPhaseRunE(t *testing.T) {
	var p cli.Phase
	var begunInside bool
	fn := p.RunE(func(*cobra.Command, []string) error {
		begunInside = cli.ExitCode(p.Classify(io.EOF)) == cli.ExitFailure
		return nil
	})
	if err := fn(nil, nil); err != nil || !begunInside {
		t.Fatalf("RunE: err %v, begun inside %v; want nil, true", err, begunInside)
	}
}
