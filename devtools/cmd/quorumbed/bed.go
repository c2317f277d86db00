package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/devtools/testbed"
)

// bed starts a bed of n masters and Postgres, prints its addresses as
// environment lines and, with hold, keeps it up until ctx is done.
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
// scenario against three ordersd processes, which inherit env.
func demo(ctx context.Context, bins demoBins, env []string, out io.Writer) error {
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
	return seedScenario(ctx, b, bins, env, out)
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

// isFile reports whether path names something other than a directory.
func isFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}

// findOrdersd locates the ordersd binary: the flag, then bin/ordersd, then PATH.
func findOrdersd(flagValue string) (string, error) {
	if flagValue != "" {
		if !isFile(flagValue) {
			return "", fmt.Errorf("-ordersd %s: not an executable file", flagValue)
		}
		return filepath.Abs(flagValue)
	}
	if p := filepath.Join("bin", "ordersd"); isFile(p) {
		return filepath.Abs(p)
	}
	if p, err := exec.LookPath("ordersd"); err == nil {
		return p, nil
	}
	return "", errors.New("ordersd binary not found: run `go build -o bin/ordersd ./cmd/ordersd` or pass -ordersd")
}

// findQuorumctl locates the quorumctl binary as findOrdersd locates
// ordersd: the flag, then the quorumctl next to ordersd (the path
// findOrdersd returned, so a pair built together is run together), then
// bin/quorumctl, then PATH.
func findQuorumctl(flagValue, ordersd string) (string, error) {
	return findBeside("quorumctl", flagValue, ordersd)
}

// findShipper locates the shipper binary as findQuorumctl does.
func findShipper(flagValue, ordersd string) (string, error) {
	return findBeside("shipper", flagValue, ordersd)
}

// findBeside locates the binary name: the flag's value, then name next to
// ordersd, then bin/name, then PATH.
func findBeside(name, flagValue, ordersd string) (string, error) {
	if flagValue != "" {
		if !isFile(flagValue) {
			return "", fmt.Errorf("-%s %s: not an executable file", name, flagValue)
		}
		return filepath.Abs(flagValue)
	}
	if ordersd != "" {
		if p := filepath.Join(filepath.Dir(ordersd), name); isFile(p) {
			return filepath.Abs(p)
		}
	}
	if p := filepath.Join("bin", name); isFile(p) {
		return filepath.Abs(p)
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s binary not found: run `go build -o bin/%s ./cmd/%s` or pass -%s", name, name, name, name)
}
