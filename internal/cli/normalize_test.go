package cli_test

import (
	"slices"
	"testing"

	"github.com/spf13/cobra"

	"github.com/quorumlock/quorumlock/internal/cli"
)

func TestNormalize(t *testing.T) {
	root := &cobra.Command{Use: "tool"}
	sub := &cobra.Command{Use: "lock", Run: func(*cobra.Command, []string) {}}
	sub.Flags().Duration("ttl", 0, "")
	sub.Flags().Bool("hold", false, "")
	sub.Flags().StringP("output", "o", "", "")
	root.AddCommand(sub)
	for _, tc := range []struct{ in, want []string }{
		{[]string{"lock", "-ttl", "1s"}, []string{"lock", "--ttl", "1s"}},
		{[]string{"lock", "-ttl=1s", "-hold"}, []string{"lock", "--ttl=1s", "--hold"}},
		{[]string{"lock", "-o", "json"}, []string{"lock", "-o", "json"}},         // a shorthand
		{[]string{"lock", "--ttl", "-hold"}, []string{"lock", "--ttl", "-hold"}}, // a value
		{[]string{"lock", "--", "-ttl"}, []string{"lock", "--", "-ttl"}},
		{[]string{"lock", "-nosuch"}, []string{"lock", "-nosuch"}},
		{[]string{"nosuchcommand", "-ttl"}, []string{"nosuchcommand", "-ttl"}},
	} {
		if got := cli.Normalize(root, tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("Normalize(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
