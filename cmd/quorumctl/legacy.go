package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/quorumlock/quorumlock/internal/cli"
	"github.com/quorumlock/quorumlock/quorum"
)

// movedCmd is a hidden command of the earlier quorumctl that moved to
// quorumbed (demo, bed): it links the test bed, which the operator's binary
// must not. It only says where the command went, as bad usage.
func movedCmd(name string) *cobra.Command {
	return &cobra.Command{
		Use:                name,
		Hidden:             true,
		DisableFlagParsing: true, // the earlier flags are quorumbed's
		RunE: func(_ *cobra.Command, args []string) error {
			line := strings.Join(append([]string{name}, args...), " ")
			return cli.UsageError("%s moved to quorumbed, a separate command that links the test bed: go run ./devtools/cmd/quorumbed %s", name, line)
		},
	}
}

func (a *app) trustCmd() *cobra.Command {
	var addrs string
	cmd := &cobra.Command{
		Use:   "trust --addrs HOST:PORT[,HOST:PORT...]",
		Short: "Vouch for brand-new Redis masters to the lock's restart guard",
		Long: `trust writes each node's current run_id into its restart marker
(quorum.TrustNode), so that the lock's restart guard lets it vote before its
uptime reaches the restart window. Use it only on nodes that never held a
lock; the trust ends by itself at the node's next restart.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var list []string
			for _, s := range strings.Split(addrs, ",") {
				if s = strings.TrimSpace(s); s != "" {
					list = append(list, s)
				}
			}
			if len(list) == 0 {
				return cli.UsageError("trust: --addrs names no node")
			}
			a.phase.Begin()
			return trust(cmd.Context(), list, a.stdout)
		},
	}
	cmd.Flags().StringVar(&addrs, "addrs", "", "comma-separated Redis masters that never held a lock")
	return cmd
}

// trust vouches for each given node, as it runs now, to the restart guard
// (quorum.TrustNode): for brand-new nodes that never held a lock.
func trust(ctx context.Context, list []string, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, a := range list {
		c := redis.NewClient(trustClientOptions(a))
		err := quorum.TrustNode(ctx, c)
		_ = c.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", a, err)
		}
		fmt.Fprintf(out, "%s: trusted until its next restart\n", a)
	}
	return nil
}

// trustClientOptions are the options of trust's client to the master at
// addr: a plain connection, each request bounded by a second and never
// retried (the options trust had from the test bed, whose package an
// operator's binary must not link).
func trustClientOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr:        addr,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		MaxRetries: -1, ContextTimeoutEnabled: true, DisableIdentity: true,
	}
}
