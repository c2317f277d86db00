// Command quorumctl starts and inspects a quorumlock test bed.
//
//	quorumctl demo [-ordersd PATH]   start five Redis masters and Postgres, show each answering,
//	                                 run the seed scenario against three ordersd processes, stop
//	quorumctl bed [-hold]   start a bed, print its addresses as environment lines;
//	                        with -hold keep it up until interrupted
//	quorumctl trust -addrs A,B,...   vouch for brand-new Redis masters to the lock's
//	                                 restart guard, until each one's next restart
//
// The provider is chosen by QUORUMLOCK_TESTBED (docker, local or auto).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/integration/testbed"
	"github.com/quorumlock/quorumlock/quorum"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quorumctl:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: quorumctl demo [-ordersd PATH] | bed [-redis N] [-hold] | trust -addrs HOST:PORT[,HOST:PORT]")
	}
	switch args[0] {
	case "demo":
		bin, err := demoFlags(args[1:])
		if err != nil {
			return err
		}
		return demo(ctx, bin, out)
	case "bed":
		return bed(ctx, args[1:], out)
	case "trust":
		return trust(ctx, args[1:], out)
	default:
		return fmt.Errorf("unknown command %q: want demo, bed or trust", args[0])
	}
}

// trust vouches for each given node, as it runs now, to the restart guard
// (quorum.TrustNode): for brand-new nodes that never held a lock.
func trust(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("trust", flag.ContinueOnError)
	addrs := fs.String("addrs", "", "comma-separated Redis masters that never held a lock")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var list []string
	for _, a := range strings.Split(*addrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			list = append(list, a)
		}
	}
	if len(list) == 0 {
		return errors.New("trust: -addrs names no node")
	}
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

func bed(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("bed", flag.ContinueOnError)
	n := fs.Int("redis", 5, "number of Redis masters")
	hold := fs.Bool("hold", false, "keep the bed up until interrupted")
	if err := fs.Parse(args); err != nil {
		return err
	}
	b, err := testbed.New(ctx, testbed.Options{Redis: *n, Postgres: true})
	if err != nil {
		return err
	}
	defer b.Close()
	fmt.Fprintf(out, "QUORUMLOCK_PROVIDER=%s\n", b.Provider)
	fmt.Fprintf(out, "ORDERS_REDIS_ADDRS=%s\n", strings.Join(b.RedisAddrs(), ","))
	fmt.Fprintf(out, "ORDERS_DATABASE_URL=%s\n", b.Postgres.DSN())
	if *hold {
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

func infoField(info, key string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+":"); ok {
			return v
		}
	}
	return "?"
}
