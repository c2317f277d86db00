package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/internal/syncbuf"
	"github.com/quorumlock/quorumlock/orders/events"
)

// shipperProc is the demo's shipper process.
type shipperProc struct {
	url  string
	cmd  *exec.Cmd
	log  *syncbuf.Buffer
	done chan struct{}
}

// startShipper starts bin as the shipper "shipper1" with env, and waits
// until it answers /healthz.
func startShipper(ctx context.Context, bin string, env []string) (*shipperProc, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	_ = l.Close()
	p := &shipperProc{url: "http://" + addr, log: &syncbuf.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin)
	p.cmd.Env = slices.Concat(env, []string{"SHIPPER_LISTEN=" + addr, "SHIPPER_NAME=shipper1"})
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("shipper: %w", err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		select {
		case <-p.done:
			return nil, fmt.Errorf("shipper exited: %s", p.log.String())
		case <-ctx.Done():
			p.stop()
			return nil, ctx.Err()
		default:
		}
		if resp, err := http.Get(p.url + "/healthz"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
	}
	p.stop()
	return nil, fmt.Errorf("shipper not healthy after 30s: %s", p.log.String())
}

func (p *shipperProc) stop() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// shipScenario follows the paid order's events to a shipper: one
// shipment. Then the order.paid event is delivered a second time, as it is
// when a relay dies between publishing and marking its rows, and the
// shipper still holds one shipment.
func shipScenario(ctx context.Context, b *testbed.Bed, shipper string, env []string, orderID string, out io.Writer) error {
	fmt.Fprintf(out, "\nthe order's events reach a shipper (cmd/shipper, consumer group \"shipper\", exact dedup)\n")
	p, err := startShipper(ctx, shipper, env)
	if err != nil {
		return err
	}
	defer p.stop()
	conn, err := pgx.Connect(ctx, b.Postgres.DSN())
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer conn.Close(context.Background())
	shipments := func() (int, error) {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM shipments WHERE order_id = $1`, orderID).Scan(&n)
		return n, err
	}
	if err := waitFor(ctx, 30*time.Second, "the shipment", func() (bool, error) { n, err := shipments(); return n >= 1, err }); err != nil {
		return fmt.Errorf("%w: %s", err, p.log.String())
	}
	rdb := redis.NewClient(testbed.ClientOptions(b.RedisAddrs()[0]))
	defer rdb.Close()
	paid, total, err := paidEvent(ctx, rdb, orderID)
	if err != nil {
		return err
	}
	n, _ := shipments()
	fmt.Fprintf(out, "  %d events on the stream %s; the order.paid one is entry %s\n  shipments for the order: %d\n", total, events.DefaultStream, paid.ID, n)
	copyID, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: events.DefaultStream, Values: paid.Values}).Result()
	if err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	fmt.Fprintf(out, "  the same event added again as entry %s (what a relay killed after XADD does)\n", copyID)
	dups, hits, err := p.waitDuplicate(ctx)
	if err != nil {
		return fmt.Errorf("%w: %s", err, p.log.String())
	}
	n, err = shipments()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  the shipper got it: events_consumed_total{result=\"duplicate\"} %.0f, events_dedup_total{layer=\"redis\",result=\"hit\"} %.0f\n", dups, hits)
	fmt.Fprintf(out, "  shipments for the order: %d\n", n)
	if n != 1 {
		return fmt.Errorf("the order has %d shipments after a duplicate delivery, want 1", n)
	}
	return nil
}

// paidEvent finds the order.paid event of orderID on the events stream,
// and counts the stream's entries.
func paidEvent(ctx context.Context, rdb *redis.Client, orderID string) (*redis.XMessage, int, error) {
	msgs, err := rdb.XRange(ctx, events.DefaultStream, "-", "+").Result()
	if err != nil {
		return nil, 0, fmt.Errorf("stream: %w", err)
	}
	var paid *redis.XMessage
	for i, m := range msgs {
		if m.Values["event_id"] == orderID+"/"+string(events.OrderPaid) {
			paid = &msgs[i]
		}
	}
	if paid == nil {
		return nil, 0, fmt.Errorf("no %s event for %s on the stream", events.OrderPaid, orderID)
	}
	return paid, len(msgs), nil
}

// waitDuplicate waits until the shipper's metrics count a duplicate
// delivery, and returns its duplicate count and its Redis dedup hits.
func (p *shipperProc) waitDuplicate(ctx context.Context) (dups, hits float64, err error) {
	err = waitFor(ctx, 30*time.Second, "the shipper to see the copy", func() (bool, error) {
		m, err := scrapeMetrics(ctx, p.url+"/metrics")
		if err != nil {
			return false, err
		}
		dups, _ = m.sum("events_consumed_total", map[string]string{"result": "duplicate"})
		hits, _ = m.sum("events_dedup_total", map[string]string{"layer": "redis", "result": "hit"})
		return dups >= 1, nil
	})
	return dups, hits, err
}

// waitFor polls cond every 50ms until it holds, for at most d.
func waitFor(ctx context.Context, d time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(d)
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s (last error: %v)", d, what, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
