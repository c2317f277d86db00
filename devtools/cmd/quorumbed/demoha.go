package main

// The HA demo (quorumbed demo --ha): the double-click story on a Postgres
// HA group, with the primary killed in the middle of the second
// double-click.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/quorumlock/quorumlock/devtools/audit"
	"github.com/quorumlock/quorumlock/devtools/testbed"
)

// The HA demo's bounds: every wait of the demo ends by one of them.
const (
	// haDemoTimeout bounds the whole demo, the bed's start included.
	haDemoTimeout = 6 * time.Minute
	// haAttemptTimeout bounds one request: no answer within it is a hang.
	haAttemptTimeout = 20 * time.Second
	// haFailoverLimit bounds, from the fault, the monitor's promotion of
	// the standby, /readyz naming it and every click's final answer.
	haFailoverLimit = 60 * time.Second
	// haRejoinLimit bounds, from the old primary's restart, its return as
	// the synchronous standby.
	haRejoinLimit = 90 * time.Second
	// haInFlightLimit bounds the wait for an order to reach the primary.
	haInFlightLimit = 10 * time.Second
)

// haStock is product 42's stock in the HA demo: one unit per double-click.
const haStock = 2

// haBody is the body of every click of the HA demo.
const haBody = `{"productId": "42", "quantity": 1, "addressVersion": "v1", "couponId": null}`

// demoHA starts a bed of five masters and a Postgres HA group and tells
// the double-click story on three ordersd processes (of bin, inheriting
// base) on the group's multi-host URI: one double-click as in the seed
// demo, then another during which the primary is killed; then the old
// primary's return as a standby and the audit.
func demoHA(ctx context.Context, bin string, base []string, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, haDemoTimeout)
	defer cancel()
	start := time.Now()
	b, err := testbed.New(ctx, testbed.Options{Redis: 5, PostgresHA: true})
	if err != nil {
		return fmt.Errorf("the bed with a Postgres HA group: %w", err)
	}
	defer b.Close()
	fmt.Fprintf(out, "bed up in %v with the %s provider: %d Redis masters and a Postgres HA group (pg_auto_failover: a monitor, a primary and a synchronous standby)\n",
		time.Since(start).Round(time.Millisecond), b.Provider, len(b.Redis))
	s := &haStory{g: b.PostgresHA, out: out}
	if s.hosts, err = uriHosts(s.g.URI()); err != nil {
		return err
	}
	if err := s.printGroup(ctx, "  "); err != nil {
		return err
	}
	fmt.Fprintf(out, "  every ordersd gets ORDERS_DATABASE_URL=%s\n", s.g.URI())
	if err := trustBed(ctx, b); err != nil {
		return err
	}
	stop, err := s.startOrders(ctx, b, bin, base)
	defer stop()
	if err != nil {
		return err
	}
	if err := s.run(ctx); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nthe HA demo took %v, the bed's start included\n", time.Since(start).Round(time.Millisecond))
	return nil
}

// haStory is the state of the HA demo's story.
type haStory struct {
	g     *testbed.PostgresGroup
	procs []*ordersdProc
	token string
	hosts []string // the hosts of the group's URI, in its order
	out   io.Writer
	resps []audit.Response // every click's final answer, for the audit
}

// startOrders migrates the group's database through its URI, seeds
// product 42, starts fakepay and three ordersd instances, and makes the
// buyer's token. The function it returns stops what it started.
func (s *haStory) startOrders(ctx context.Context, b *testbed.Bed, bin string, base []string) (func(), error) {
	payLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return func() {}, err
	}
	stops := []func(){func() { _ = payLn.Close() }}
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	env := demoEnv(base, b, s.g.URI(), "http://"+payLn.Addr().String())
	runTool := ordersdTool(ctx, bin, env)
	if _, err := runTool("migrate"); err != nil {
		return stop, err
	}
	if _, err := runTool("seed", "-product", "42", "-stock", strconv.Itoa(haStock), "-price", "1999"); err != nil {
		return stop, err
	}
	fmt.Fprintf(s.out, "\nproduct 42 has %d units in stock; starting three ordersd instances\n", haStock)
	s.procs, err = startInstances(ctx, bin, env, s.out)
	stops = append(stops, func() { stopAll(s.procs) })
	if err != nil {
		return stop, err
	}
	_, stopPay, err := serveFakepay(payLn, s.procs[0].url)
	if err != nil {
		return stop, err
	}
	stops = append(stops, stopPay)
	s.token, err = runTool("token", "-user", "u1001", "-ttl", "10m")
	return stop, err
}

// run tells the story: the first double-click, the second with the
// primary killed, the old primary's return, the audit and the timings.
func (s *haStory) run(ctx context.Context) error {
	fmt.Fprintf(s.out, "\nu1001 clicks twice and the gateway retries: 3 x POST /orders, Idempotency-Key: req-001\n  %s\n", haBody)
	first := s.clicks(ctx, "req-001", time.Now().Add(haFailoverLimit))
	if err := errors.Join(s.report(first), oneOrder(first)); err != nil {
		return fmt.Errorf("the first double-click: %w", err)
	}
	victim, err := s.g.Primary(ctx)
	if err != nil {
		return fmt.Errorf("before the fault: %w", err)
	}
	f, err := s.failover(ctx, victim)
	if err != nil {
		return err
	}
	if f.rejoined, err = s.rejoin(ctx, victim, f.primary); err != nil {
		return err
	}
	rows, stock, verdict, err := auditProduct42(ctx, s.g.URI(), haStock, s.resps, s.out)
	if err != nil {
		return fmt.Errorf("the audit, through the group's URI: %w", err)
	}
	if !verdict.OK() || len(rows) != 2 || stock != 0 {
		return errors.New("the HA demo did not end with one order per key (2 in all) and stock 0")
	}
	f.print(s.out)
	return nil
}

// printGroup prints what the monitor says of each data node, with its
// address, each line after indent.
func (s *haStory) printGroup(ctx context.Context, indent string) error {
	states, err := s.g.State(ctx)
	if err != nil {
		return err
	}
	for _, st := range states {
		health := "healthy"
		if !st.Healthy {
			health = "unhealthy"
		}
		addr := "?"
		for _, n := range s.g.Nodes {
			if n.Name() == st.Name {
				addr = n.Addr()
			}
		}
		fmt.Fprintf(s.out, "%s%s at %s: %s (%s)\n", indent, st.Name, addr, st.Reported, health)
	}
	return nil
}

// nodeAt is the name of the data node whose address is addr, or addr.
func (s *haStory) nodeAt(addr string) string {
	for _, n := range s.g.Nodes {
		if n.Addr() == addr {
			return n.Name()
		}
	}
	return addr
}

// uriHosts lists the host:port pairs of a multi-host URI, in the order a
// client tries them (and /readyz numbers them).
func uriHosts(uri string) ([]string, error) {
	cfg, err := pgconn.ParseConfig(uri)
	if err != nil {
		return nil, fmt.Errorf("the group's URI: %w", err)
	}
	var out []string
	seen := map[string]bool{}
	for _, h := range append([]*pgconn.FallbackConfig{{Host: cfg.Host, Port: cfg.Port}}, cfg.Fallbacks...) {
		hp := net.JoinHostPort(h.Host, strconv.Itoa(int(h.Port)))
		if !seen[hp] {
			seen[hp] = true
			out = append(out, hp)
		}
	}
	return out, nil
}
