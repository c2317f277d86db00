package integration_test

// The checks of a failover run beyond the orders table: what was done on
// an order's behalf outside it (the events in the stream, the shipments,
// the charges) must name orders the surviving primary holds.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/devtools/audit"
	"github.com/quorumlock/quorumlock/orders/events"
	"github.com/quorumlock/quorumlock/orders/payment"
)

// haShipperGroup is the shipper's consumer group (its default).
const haShipperGroup = "shipper"

// startHAShipper runs a shipper on the group's URI and the stream of the
// first master, where ordersd's relay publishes.
func (d *drill) startHAShipper(bin string) *daemon {
	d.t.Helper()
	return startShipper(d.t, bin, "shipper", map[string]string{
		"ORDERS_DATABASE_URL":      d.dsn,
		"ORDERS_EVENTS_REDIS_ADDR": d.bed.RedisAddrs()[0],
		"ORDERS_LOG_FORMAT":        "json",
		"SHIPPER_LISTEN":           "127.0.0.1:0",
		"SHIPPER_NAME":             "shipper",
	})
}

// waitDrained waits up to d until the outbox has nothing left to send and
// the shipper has acknowledged every event of the stream.
func (d *drill) waitDrained(t *testing.T, limit time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	rdb := d.bed.Redis[0].Admin()
	defer rdb.Close()
	var unsent, lag, pending int64
	for {
		err := d.pool.QueryRow(ctx, "SELECT count(*) FROM order_events WHERE sent_at IS NULL").Scan(&unsent)
		if err == nil {
			lag, pending, err = groupBehind(ctx, rdb)
		}
		if err == nil && unsent == 0 && lag == 0 && pending == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("events not drained within %v: %d unsent in the outbox, the shipper %d behind and %d pending (%v)", limit, unsent, lag, pending, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// groupBehind is how many entries the shipper's group has not read yet
// and how many it has read and not acknowledged.
func groupBehind(ctx context.Context, rdb *redis.Client) (lag, pending int64, err error) {
	groups, err := rdb.XInfoGroups(ctx, events.DefaultStream).Result()
	if err != nil {
		return 0, 0, err
	}
	for _, g := range groups {
		if g.Name == haShipperGroup {
			return g.Lag, g.Pending, nil
		}
	}
	return 0, 0, errors.New("the shipper's group is not on the stream yet")
}

// haEffects reads what was done outside the orders table: every order
// event in the stream, the order.paid events the shipper acknowledged
// (read by its group and not pending), and fakepay's succeeded charges.
func (d *drill) haEffects(t *testing.T) []audit.Effect {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := d.bed.Redis[0].Admin()
	defer rdb.Close()
	msgs, err := rdb.XRange(ctx, events.DefaultStream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	pend, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: events.DefaultStream, Group: haShipperGroup, Start: "-", End: "+", Count: 1_000_000}).Result()
	if err != nil {
		t.Fatal(err)
	}
	pending := map[string]bool{}
	for _, p := range pend {
		pending[p.ID] = true
	}
	groups, err := rdb.XInfoGroups(ctx, events.DefaultStream).Result()
	if err != nil {
		t.Fatal(err)
	}
	var read string
	for _, g := range groups {
		if g.Name == haShipperGroup {
			read = g.LastDeliveredID
		}
	}
	var out []audit.Effect
	for _, m := range msgs {
		typ, _ := m.Values["type"].(string)
		id, _ := m.Values["order_id"].(string)
		out = append(out, audit.Effect{Kind: audit.EffectEvent, OrderID: id, Ref: m.ID + " " + typ})
		if typ == string(events.OrderPaid) && read != "" && streamIDLE(m.ID, read) && !pending[m.ID] {
			out = append(out, audit.Effect{Kind: audit.EffectShipped, OrderID: id, Ref: m.ID})
		}
	}
	for key, ks := range d.pay.Stats().ByKey {
		if ks.Status != payment.StatusSucceeded {
			continue
		}
		c, err := d.pay.Lookup(key)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, audit.Effect{Kind: audit.EffectCharge, OrderID: c.OrderID, Ref: key})
	}
	return out
}

// streamIDLE reports whether stream id a is not after b ("ms-seq").
func streamIDLE(a, b string) bool {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	if len(am) != len(bm) {
		return len(am) < len(bm)
	}
	if am != bm {
		return am < bm
	}
	if len(as) != len(bs) {
		return len(as) < len(bs)
	}
	return as <= bs
}
