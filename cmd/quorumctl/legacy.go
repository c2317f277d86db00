package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/quorumlock/quorumlock/integration/testbed"
	"github.com/quorumlock/quorumlock/quorum"
)

func (a *app) demoCmd() *cobra.Command {
	var bin string
	cmd := &cobra.Command{
		Use:   "demo [--ordersd PATH]",
		Short: "Start a bed and run the seed scenario against three ordersd processes",
		Long: `demo starts five Redis masters and Postgres, shows each answering, runs the
seed scenario (three identical requests for the last unit on three ordersd
instances, then a payment whose first reply is lost) and stops the bed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, err := findOrdersd(bin)
			if err != nil {
				return usageError("%w", err)
			}
			a.started = true
			return demo(cmd.Context(), path, a.stdout)
		},
	}
	cmd.Flags().StringVar(&bin, "ordersd", "", "path of the ordersd binary (default bin/ordersd, then PATH)")
	return cmd
}

func (a *app) bedCmd() *cobra.Command {
	var n int
	var hold bool
	cmd := &cobra.Command{
		Use:   "bed [--redis N] [--hold]",
		Short: "Start a bed and print its addresses as environment lines",
		Args:  cobra.NoArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			return bed(cmd.Context(), n, hold, a.stdout)
		}),
	}
	cmd.Flags().IntVar(&n, "redis", 5, "number of Redis masters")
	cmd.Flags().BoolVar(&hold, "hold", false, "keep the bed up until interrupted")
	return cmd
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
				return usageError("trust: --addrs names no node")
			}
			a.started = true
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
		c := redis.NewClient(testbed.ClientOptions(a))
		err := quorum.TrustNode(ctx, c)
		_ = c.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", a, err)
		}
		fmt.Fprintf(out, "%s: trusted until its next restart\n", a)
	}
	return nil
}

func bed(ctx context.Context, n int, hold bool, out io.Writer) error {
	b, err := testbed.New(ctx, testbed.Options{Redis: n, Postgres: true})
	if err != nil {
		return err
	}
	defer b.Close()
	fmt.Fprintf(out, "QUORUMLOCK_PROVIDER=%s\n", b.Provider)
	fmt.Fprintf(out, "ORDERS_REDIS_ADDRS=%s\n", strings.Join(b.RedisAddrs(), ","))
	fmt.Fprintf(out, "ORDERS_DATABASE_URL=%s\n", b.Postgres.DSN())
	if hold {
		fmt.Fprintln(out, "# bed is up; interrupt to stop it")
		<-ctx.Done()
	}
	return nil
}

// demo starts the bed, shows every server answering, and runs the seed
// scenario against three ordersd processes.
func demo(ctx context.Context, bin string, out io.Writer) error {
	start := time.Now()
	b, err := testbed.New(ctx, testbed.Options{Redis: 5, Postgres: true})
	if err != nil {
		return err
	}
	defer b.Close()
	fmt.Fprintf(out, "bed up in %v with the %s provider\n", time.Since(start).Round(time.Millisecond), b.Provider)
	for _, n := range b.Redis {
		c := redis.NewClient(testbed.ClientOptions(n.Addr()))
		pong, err := c.Ping(ctx).Result()
		info, ierr := c.Info(ctx, "server").Result()
		_ = c.Close()
		if err := errors.Join(err, ierr); err != nil {
			return fmt.Errorf("%s: %w", n.Name(), err)
		}
		fmt.Fprintf(out, "  %s at %s: %s (redis %s)\n", n.Name(), n.Addr(), pong, infoField(info, "redis_version"))
	}
	conn, err := pgx.Connect(ctx, b.Postgres.DSN())
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer conn.Close(context.Background())
	var version string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	fmt.Fprintf(out, "  postgres at %s: PostgreSQL %s\n", b.Postgres.Addr(), version)
	return seedScenario(ctx, b, bin, out)
}

// infoField returns the value of key in an INFO reply, or "?".
func infoField(info, key string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+":"); ok {
			return v
		}
	}
	return "?"
}
