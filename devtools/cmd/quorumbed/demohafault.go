package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/quorumlock/quorumlock/devtools/testbed"
)

// haFailover is what the failover step saw, for the timings.
type haFailover struct {
	victim, primary string        // the old primary and the new one
	fault           time.Time     // when the SIGKILL was sent
	notReady        time.Time     // /readyz's first 503 after it, zero if none was seen
	promoted        time.Time     // the monitor's event that made the standby the primary
	readyNamed      time.Time     // /readyz naming the new primary
	first201        time.Time     // the first 201 a click got after the fault
	answered        time.Time     // the last click's final answer
	longestRetry    time.Duration // the longest Retry-After a click got
	rejoined        time.Duration // from the old primary's restart to the group steady again
}

// print prints the timings.
func (f *haFailover) print(out io.Writer) {
	since := func(t time.Time) string {
		if t.IsZero() {
			return "not seen"
		}
		return t.Sub(f.fault).Round(time.Millisecond).String()
	}
	fmt.Fprintf(out, "\ntimings, from the SIGKILL of %s:\n", f.victim)
	for _, row := range [][2]string{
		{"/readyz on ordersd1 answers 503", since(f.notReady)},
		{"the monitor promotes " + f.primary, since(f.promoted)},
		{"/readyz on ordersd1 names " + f.primary, since(f.readyNamed)},
		{"the first 201 to a retried click", since(f.first201) +
			fmt.Sprintf(" (a client sends again after the Retry-After it got: up to %v here)", f.longestRetry)},
		{"every click answered for good", since(f.answered)},
		{f.victim + " back as the synchronous standby", f.rejoined.Round(time.Millisecond).String() + " after its restart"},
	} {
		fmt.Fprintf(out, "  %-40s %s\n", row[0], row[1])
	}
}

// failover tells the second double-click: the primary is killed while the
// clicks are in flight; then what the clients saw, the monitor's events
// and /readyz naming the new primary.
func (s *haStory) failover(ctx context.Context, victim *testbed.PostgresHANode) (*haFailover, error) {
	r := s.readyz(ctx)
	if r.status != http.StatusOK {
		return nil, fmt.Errorf("ordersd1 is not ready before the fault: %d %s", r.status, r.body)
	}
	fmt.Fprintf(s.out, "\n/readyz on ordersd1: %d %s\n", r.status, s.readyLine(r.body))
	fmt.Fprintf(s.out, "\nu1001 buys the last unit the same way: 3 x POST /orders, Idempotency-Key: req-002;\n"+
		"%s, the primary, is killed (SIGKILL) while they are in flight\n", victim.Name())
	f := &haFailover{victim: victim.Name()}
	clicked, err := s.killInFlight(ctx, victim, f)
	if err != nil {
		return nil, err
	}
	primary, ready, werr := s.watchFailover(ctx, f, victim)
	traces := <-clicked
	fmt.Fprintln(s.out, "\nwhat each click's client saw (it sends again after what Retry-After says, until a final answer):")
	err = errors.Join(s.report(traces), werr, oneOrder(traces))
	for _, t := range traces {
		if !t.at.IsZero() && (f.first201.IsZero() || t.at.Before(f.first201)) && t.final().status == http.StatusCreated {
			f.first201 = t.at
		}
		for _, r := range t.answers {
			if w, err := retryWait(r); err == nil && r.retryAfter != "" {
				f.longestRetry = max(f.longestRetry, w)
			}
		}
		if t.at.After(f.answered) {
			f.answered = t.at
		}
	}
	if primary != nil {
		f.primary = primary.Name()
		err = errors.Join(err, s.printEvents(ctx, f))
	}
	s.printReady(f, ready)
	if err != nil {
		return nil, fmt.Errorf("the failover: %w", err)
	}
	return f, nil
}

// killInFlight sends the second double-click while the demo's own
// transaction on victim holds product 42's stock row, so that the order
// waits inside the primary; once an order's transaction waits there, it
// kills victim. The channel gives the clicks' traces once each has a final
// answer.
func (s *haStory) killInFlight(ctx context.Context, victim *testbed.PostgresHANode, f *haFailover) (<-chan []haTrace, error) {
	hctx, cancel := context.WithTimeout(ctx, haInFlightLimit)
	defer cancel()
	hold, err := pgx.Connect(hctx, victim.DSN())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", victim.Name(), err)
	}
	if _, err := hold.Exec(hctx, "BEGIN; SELECT available FROM product_stock WHERE product_id = '42' FOR UPDATE"); err != nil {
		_ = hold.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("%s: hold the stock row: %w", victim.Name(), err)
	}
	fmt.Fprintf(s.out, "  (a transaction of the demo's own on %s holds product 42's stock row, so the order waits inside the primary)\n", victim.Name())
	clicked := make(chan []haTrace, 1)
	go func() { clicked <- s.clicks(ctx, "req-002", time.Now().Add(haInFlightLimit+haFailoverLimit)) }()
	waiting, err := lockWaiters(hctx, victim.DSN())
	if err == nil {
		f.fault = time.Now()
		err = victim.Kill(ctx)
	}
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer ccancel()
	_ = hold.Close(cctx) // before the kill, this lets the clicks go on
	if err != nil {
		<-clicked
		return nil, fmt.Errorf("%s: the kill in the middle of the double-click: %w", victim.Name(), err)
	}
	fmt.Fprintf(s.out, "  SIGKILL %s (its keeper, Postgres and every backend), %d order transaction(s) waiting inside it\n", victim.Name(), waiting)
	return clicked, nil
}

// lockWaiters waits until a client backend of the server at dsn waits for
// a lock, and returns how many do; it polls every 50 ms until ctx ends.
func lockWaiters(ctx context.Context, dsn string) (int, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND backend_type = 'client backend'`).Scan(&n)
		if err == nil && n > 0 {
			return n, nil
		}
		if serr := sleepCtx(ctx, 50*time.Millisecond); serr != nil {
			return 0, fmt.Errorf("no order transaction waits on the stock row: %w (last: %v)", serr, err)
		}
	}
}

// oneOrder checks that the clicks of one double-click all ended in a 201
// naming the same order, of which only one is not a replay.
func oneOrder(traces []haTrace) error {
	var ids []string
	fresh := 0
	for _, t := range traces {
		if t.err != nil || len(t.answers) == 0 {
			continue
		}
		f := t.final()
		if f.status != http.StatusCreated || f.orderID == "" {
			return fmt.Errorf("%s ended with %d %s, want 201 and the order", t.proc.name, f.status, f.body)
		}
		ids = append(ids, f.orderID)
		if !f.replayed {
			fresh++
		}
	}
	if slices.Sort(ids); len(slices.Compact(ids)) > 1 || fresh > 1 {
		return fmt.Errorf("the clicks of one double-click name %d orders, %d of their 201s not replays: want one order", len(slices.Compact(ids)), fresh)
	}
	return nil
}

// rejoin restarts the old primary and waits until it is the group's
// synchronous standby again; then a write on it alone must be refused
// with SQLSTATE 25006. It returns the time from the restart to the group
// steady again.
func (s *haStory) rejoin(ctx context.Context, victim *testbed.PostgresHANode, primary string) (time.Duration, error) {
	fmt.Fprintf(s.out, "\n%s is restarted (pg_autoctl run, with its data): the monitor makes it a standby of %s\n", victim.Name(), primary)
	rctx, cancel := context.WithTimeout(ctx, haRejoinLimit)
	defer cancel()
	at := time.Now()
	if err := victim.Restart(rctx); err != nil {
		return 0, fmt.Errorf("the restart of %s: %w", victim.Name(), err)
	}
	if err := s.g.WaitSteady(rctx); err != nil {
		ev, _ := s.g.Events(context.WithoutCancel(ctx), 10)
		return 0, fmt.Errorf("%s did not come back as the synchronous standby within %v: %w; the monitor's last events: %v", victim.Name(), haRejoinLimit, err, ev)
	}
	took := time.Since(at)
	fmt.Fprintf(s.out, "  the group is steady again %v after the restart:\n", took.Round(time.Millisecond))
	if err := s.printGroup(ctx, "    "); err != nil {
		return 0, err
	}
	const write = "UPDATE product_stock SET available = available WHERE product_id = '42'"
	err := writeOn(ctx, victim.DSN(), write)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "25006" {
		return 0, fmt.Errorf("a write on %s alone, the old primary: %v, want SQLSTATE 25006 (read_only_sql_transaction)", victim.Name(), err)
	}
	fmt.Fprintf(s.out, "  a write on %s alone (%s):\n    %v\n", victim.Name(), write, err)
	return took, nil
}

// writeOn runs the statement write on the server at dsn alone.
func writeOn(ctx context.Context, dsn, write string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, write)
	return err
}
