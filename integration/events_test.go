package integration_test

// Order-event drills: the outbox relay, the stream and the shipper
// (cmd/shipper) on the bed, as real processes, with real crashes.
//
//	drill                                                           test
//	the shipper is killed after its commit, before its XACK: another
//	takes the message over, exactly one shipment, nothing pending    TestEvents/ConsumerKilledBeforeAck
//	ordersd's relay is killed between XADD and marking the rows
//	sent: the next relay sends them again, the stream holds each
//	event twice with one id, the shipper ships once                 TestEvents/RelayKilledBeforeMark
//	two shippers with a short claim idle race on claimed messages
//	over 300 paid orders, every event twice in the stream            TestEvents/ConsumersRace
//	the Redis dedup records are lost: the consumed_events row stops
//	the repeats (counted as postgres hits); with the row gone too,
//	the same check sees the doubles                                  TestEvents/RedisDedupLost
//	2,000 events and 200 copies at random positions (10,000 and 1,000
//	with -tags chaos, which `make chaos` runs): exact mode
//	ships each paid order once; approximate mode with each filter
//	skips a measured fraction (false positives) within bounds; a
//	naive consumer and undersized filters fail the same checks       TestEvents/Flood/...
//	the shipper refuses a database ordersd has not migrated          TestEvents/ShipperRefusesUnmigrated
//
// Each safety check is also shown failing where its guarantee is taken
// away: the one-shipment check (doubles) sees the doubles of a naive
// consumer (Flood/NaiveControl) and of a shipper whose Redis and Postgres
// records are both gone (RedisDedupLost); the pending check sees the
// message the killed shipper left (ConsumerKilledBeforeAck); the
// approximate check refuses a saturated filter and one that forgets
// (Flood/UndersizedControl).
//
// Each drill has its own database and its own Redis node of one bed.
// Crashes are failpoints (internal/failpoint) of binaries built with
// -tags failpoints, checked as deaths by SIGKILL. Waits are for a log line,
// a process exit, or a database or stream state, each with a deadline.
//
//	QUORUMLOCK_TESTBED=local go test -count=1 -run 'TestEvents' ./integration/

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/devtools/storetest"
	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/internal/failpoint"
	"github.com/quorumlock/quorumlock/orders/events"
)

// eventsKit is the drills' bed and their binaries, built with -tags
// failpoints.
type eventsKit struct {
	bed     *testbed.Bed
	ordersd string
	shipper string
	mu      sync.Mutex
	next    int // the next free Redis node
}

// The drills, in the order they run.
var eventDrills = []struct {
	name string
	run  func(*testing.T, *evWorld)
}{
	{"ConsumerKilledBeforeAck", drillConsumerKilledBeforeAck},
	{"RelayKilledBeforeMark", drillRelayKilledBeforeMark},
	{"ConsumersRace", drillConsumersRace},
	{"RedisDedupLost", drillRedisDedupLost},
	{"Flood", drillFlood},
	{"ShipperRefusesUnmigrated", drillShipperRefusesUnmigrated},
}

// TestEvents runs the order-event drills on one bed, one after the other
// (the machine has two cores, and the flood wants them).
func TestEvents(t *testing.T) {
	start := time.Now()
	k := &eventsKit{}
	var wg sync.WaitGroup
	var errOrdersd, errShipper error
	wg.Go(func() { k.ordersd, errOrdersd = builds.path("github.com/quorumlock/quorumlock/cmd/ordersd") })
	wg.Go(func() { k.shipper, errShipper = builds.path("github.com/quorumlock/quorumlock/cmd/shipper") })
	// No process of these drills restarts Redis: the AOF is not needed.
	k.bed = bedtest.Start(t, testbed.Options{Redis: len(eventDrills), Postgres: true, AppendFsync: testbed.FsyncOff})
	wg.Wait()
	if errOrdersd != nil || errShipper != nil {
		t.Fatal(errOrdersd, errShipper)
	}
	t.Logf("events: bed (%s) and ordersd, shipper -tags failpoints ready in %v", k.bed.Provider, time.Since(start).Round(time.Millisecond))
	for _, dr := range eventDrills {
		t.Run(dr.name, func(t *testing.T) { dr.run(t, newWorld(t, k)) })
	}
}

// evWorld is one drill's world: a migrated database with product 42, a
// Redis node of its own, and the event stream on it.
type evWorld struct {
	t      *testing.T
	k      *eventsKit
	dsn    string
	pool   *pgxpool.Pool
	addr   string // the Redis node's address
	rdb    *redis.Client
	stream string
}

func newWorld(t *testing.T, k *eventsKit) *evWorld {
	t.Helper()
	k.mu.Lock()
	if k.next >= len(k.bed.Redis) {
		k.mu.Unlock()
		t.Fatal("no Redis node left for this drill")
	}
	node := k.bed.Redis[k.next]
	k.next++
	k.mu.Unlock()
	db := storetest.New(t, k.bed.Postgres)
	if err := db.Store.SeedProduct(context.Background(), "42", 1_000_000_000, 100); err != nil {
		t.Fatal(err)
	}
	o := testbed.ClientOptions(node.Addr())
	o.ReadTimeout = 5 * time.Second // the flood's pipelines are long
	rdb := redis.NewClient(o)
	t.Cleanup(func() { _ = rdb.Close() })
	return &evWorld{t: t, k: k, dsn: db.DSN, pool: db.Pool, addr: node.Addr(), rdb: rdb, stream: events.DefaultStream}
}

// in is w for the subtest t: its helpers then fail t, from t's goroutine.
func (w *evWorld) in(t *testing.T) *evWorld {
	c := *w
	c.t = t
	return &c
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// paidOrders inserts n orders with ids prefix-0..prefix-(n-1) straight into
// the table and pays them: the trigger writes an order.created and an
// order.paid event for each.
func (w *evWorld) paidOrders(prefix string, n int) {
	w.t.Helper()
	ctx := ctxFor(w.t, 2*time.Minute)
	if _, err := w.pool.Exec(ctx, `INSERT INTO orders (order_id, user_id, product_id, quantity, amount_cents,
idempotency_key, request_fingerprint, status, response_status, response_body, fence)
SELECT $1 || '-' || i, 'u-' || i, '42', 1 + i % 3, 100, $1 || '-' || i, 'fp', 'CREATED', 201, '\x7b7d', 1
FROM generate_series(0, $2::int - 1) AS i`, prefix, n); err != nil {
		w.t.Fatal(err)
	}
	if _, err := w.pool.Exec(ctx, `UPDATE orders SET status = 'PAID' WHERE order_id LIKE $1 || '-%'`, prefix); err != nil {
		w.t.Fatal(err)
	}
}

// onlyPaid marks every unsent event that is not an order.paid sent, so
// that no relay publishes it: for drills whose point is the paid event.
func (w *evWorld) onlyPaid() {
	w.t.Helper()
	if _, err := w.pool.Exec(ctxFor(w.t, time.Minute), `UPDATE order_events SET sent_at = now(), stream_id = 'not-sent'
WHERE sent_at IS NULL AND type <> 'order.paid'`); err != nil {
		w.t.Fatal(err)
	}
}

// publish drains the outbox into stream with an in-test relay.
func (w *evWorld) publish(stream string, batch int) int {
	w.t.Helper()
	r, err := events.NewRelay(w.pool, w.rdb, events.WithStream(stream), events.WithBatch(batch))
	if err != nil {
		w.t.Fatal(err)
	}
	total := 0
	for range 10_000 {
		n, err := r.PublishOnce(ctxFor(w.t, time.Minute))
		if err != nil {
			w.t.Fatal(err)
		}
		if n == 0 {
			return total
		}
		total += n
	}
	w.t.Fatal("the outbox never drained")
	return 0
}

// copyEntries appends another copy of every entry of the stream that keep
// accepts (nil: all), as a relay that died before marking would, and
// returns how many it added.
func (w *evWorld) copyEntries(keep func(redis.XMessage) bool) int {
	w.t.Helper()
	ctx := ctxFor(w.t, time.Minute)
	msgs, err := w.rdb.XRange(ctx, w.stream, "-", "+").Result()
	if err != nil {
		w.t.Fatal(err)
	}
	n := 0
	_, err = w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, m := range msgs {
			if keep == nil || keep(m) {
				p.XAdd(ctx, &redis.XAddArgs{Stream: w.stream, Values: m.Values})
				n++
			}
		}
		return nil
	})
	if err != nil {
		w.t.Fatal(err)
	}
	return n
}

func isPaid(m redis.XMessage) bool { return m.Values["type"] == string(events.OrderPaid) }

// count runs a query that returns one number.
func (w *evWorld) count(sql string, args ...any) int {
	w.t.Helper()
	var n int
	if err := w.pool.QueryRow(ctxFor(w.t, time.Minute), sql, args...).Scan(&n); err != nil {
		w.t.Fatal(err)
	}
	return n
}

// doubles counts the order lines with more than one shipment reserved by
// a consumer whose name matches like: the drills' safety check.
func (w *evWorld) doubles(like string) int {
	w.t.Helper()
	return w.count(`SELECT count(*) FROM (SELECT order_id FROM shipments WHERE reserved_by LIKE $1
GROUP BY order_id, product_id HAVING count(*) > 1) d`, like)
}

func (w *evWorld) shipments(like string) int {
	w.t.Helper()
	return w.count(`SELECT count(*) FROM shipments WHERE reserved_by LIKE $1`, like)
}

func (w *evWorld) consumed(group string) int {
	w.t.Helper()
	return w.count(`SELECT count(*) FROM consumed_events WHERE consumer_group = $1`, group)
}

func (w *evWorld) unsent() int {
	w.t.Helper()
	return w.count(`SELECT count(*) FROM order_events WHERE sent_at IS NULL`)
}

// pending is the group's XPENDING count (0 when the group does not exist).
func (w *evWorld) pending(group string) int64 {
	w.t.Helper()
	p, err := w.rdb.XPending(ctxFor(w.t, time.Minute), w.stream, group).Result()
	if err != nil {
		if strings.HasPrefix(err.Error(), "NOGROUP") {
			return 0
		}
		w.t.Fatal(err)
	}
	return p.Count
}

// drained reports whether the group read up to the stream's last entry
// and acknowledged everything.
func (w *evWorld) drained(group string) bool {
	w.t.Helper()
	ctx := ctxFor(w.t, time.Minute)
	info, err := w.rdb.XInfoStream(ctx, w.stream).Result()
	if err != nil {
		w.t.Fatal(err)
	}
	gs, err := w.rdb.XInfoGroups(ctx, w.stream).Result()
	if err != nil {
		w.t.Fatal(err)
	}
	for _, g := range gs {
		if g.Name == group {
			return g.LastDeliveredID == info.LastGeneratedID && g.Pending == 0
		}
	}
	return false
}

func (w *evWorld) xlen() int64 {
	w.t.Helper()
	n, err := w.rdb.XLen(ctxFor(w.t, time.Minute), w.stream).Result()
	if err != nil {
		w.t.Fatal(err)
	}
	return n
}

// copiesOf counts the stream's entries of each event id.
func (w *evWorld) copiesOf() map[string]int {
	w.t.Helper()
	msgs, err := w.rdb.XRange(ctxFor(w.t, time.Minute), w.stream, "-", "+").Result()
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[string]int{}
	for _, m := range msgs {
		id, _ := m.Values["event_id"].(string)
		out[id]++
	}
	return out
}

// waitUntil polls cond until it holds, failing t after d.
func waitUntil(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// shipper starts a shipper on the world's database and stream; settings
// go over the defaults.
func (w *evWorld) shipper(name string, settings ...string) *daemon {
	w.t.Helper()
	env := map[string]string{
		"ORDERS_DATABASE_URL":      w.dsn,
		"ORDERS_EVENTS_REDIS_ADDR": w.addr,
		"ORDERS_EVENTS_STREAM":     w.stream,
		"ORDERS_LOG_FORMAT":        "json",
		"SHIPPER_LISTEN":           "127.0.0.1:0",
		"SHIPPER_NAME":             name,
	}
	for i := 0; i+1 < len(settings); i += 2 {
		env[settings[i]] = settings[i+1]
	}
	return startShipper(w.t, w.k.shipper, name, env)
}

// ordersd starts an ordersd on the world's database whose only Redis is
// the world's node, relaying every 50ms; settings go over that.
func (w *evWorld) ordersd(name string, settings map[string]string) *daemon {
	w.t.Helper()
	d := &drill{t: w.t, bed: w.k.bed, bin: w.k.ordersd, dsn: w.dsn,
		payURL: "http://127.0.0.1:9"} // never called: no order is paid through the API
	return d.start(name, with(settings, "ORDERS_REDIS_ADDRS", w.addr, "ORDERS_EVENTS_STREAM", w.stream,
		"ORDERS_RELAY_INTERVAL", "50ms"))
}

// The shipper dies by SIGKILL right after it committed the shipment of a
// paid order, before the Redis done record and the XACK. The message stays
// pending with the dead consumer, its claim still held. A second shipper
// takes the message over once it has been idle for SHIPPER_CLAIM_IDLE,
// finds the claim held until the dead one's lease ends, then finds the
// consumed_events row: no second shipment, and the message is
// acknowledged. SIGTERM then stops it cleanly.
func drillConsumerKilledBeforeAck(t *testing.T, w *evWorld) {
	w.paidOrders("kill-consume", 1)
	w.onlyPaid() // the failpoint acts on the first event committed: make it the paid one
	if n := w.publish(w.stream, 100); n != 1 {
		t.Fatalf("published %d events, want the one order.paid", n)
	}
	lease := "2s"
	a := w.shipper("shipper-a", failpoint.EnvVar, "after-consume=kill", "SHIPPER_LEASE", lease)
	a.waitFailpoint(t, failpoint.AfterConsume)
	a.waitKilled(t)

	// The effect committed; the acknowledgement never came.
	if n := w.shipments("%"); n != 1 {
		t.Fatalf("%d shipments after the crash, want the one committed", n)
	}
	if n := w.consumed("shipper"); n != 1 {
		t.Fatalf("%d consumed_events rows after the crash, want 1", n)
	}
	if p := w.pending("shipper"); p != 1 {
		t.Fatalf("XPENDING %d after the crash, want 1", p)
	}
	key := "consumed:{shipper}:kill-consume-0/order.paid"
	if v, err := w.rdb.Get(ctxFor(t, time.Minute), key).Result(); err != nil || v == "done" {
		t.Fatalf("claim %s after the crash: %q %v, want the dead consumer's token", key, v, err)
	}

	b := w.shipper("shipper-b", "SHIPPER_CLAIM_IDLE", "300ms", "SHIPPER_LEASE", lease)
	waitUntil(t, "the pending message acknowledged", 30*time.Second, func() bool { return w.pending("shipper") == 0 })
	if n := w.shipments("%"); n != 1 {
		t.Fatalf("%d shipments after the takeover, want 1", n)
	}
	if v, err := w.rdb.Get(ctxFor(t, time.Minute), key).Result(); err != nil || v != "done" {
		t.Fatalf("claim %s after the takeover: %q %v, want done", key, v, err)
	}
	m := scrape(t, b)
	if hit := metric(m, "events_dedup_total", "group", "shipper", "layer", "postgres", "result", "hit"); hit != 1 {
		t.Fatalf("the second shipper's postgres dedup hits: %v, want 1 (it found the dead one's row)", hit)
	}
	if n := metric(m, "events_consumed_total", "result", "processed"); n != 0 {
		t.Fatalf("the second shipper processed %v events, want 0", n)
	}
	t.Logf("taken over: %v busy rounds while the dead consumer's lease ran, then a duplicate",
		metric(m, "events_consumed_total", "result", "busy"))
	b.terminate(t, 10*time.Second, "shipper stopped")
}

// ordersd's relay dies by SIGKILL after its XADD and before it marks the
// rows sent: the rows stay unsent, a second ordersd publishes them again,
// the stream holds each event twice under one event id, and the shipper
// reserves one shipment.
func drillRelayKilledBeforeMark(t *testing.T, w *evWorld) {
	w.paidOrders("kill-relay", 1) // order.created and order.paid, unsent
	a := w.ordersd("A", armed(failpoint.AfterPublish, failpoint.Kill))
	a.waitFailpoint(t, failpoint.AfterPublish)
	a.waitKilled(t)
	if n := w.unsent(); n != 2 {
		t.Fatalf("%d unsent rows after the relay died, want both", n)
	}
	if n := w.xlen(); n != 2 {
		t.Fatalf("%d stream entries after the relay died, want the 2 it added", n)
	}

	w.ordersd("B", nil)
	waitUntil(t, "the second relay to mark the rows sent", 30*time.Second, func() bool { return w.unsent() == 0 })
	copies := w.copiesOf()
	for _, id := range []string{"kill-relay-0/order.created", "kill-relay-0/order.paid"} {
		if copies[id] != 2 {
			t.Fatalf("the stream holds %s %d times, want twice: %v", id, copies[id], copies)
		}
	}
	if len(copies) != 2 {
		t.Fatalf("stream events %v, want the order's two, twice each", copies)
	}

	s := w.shipper("shipper-1")
	waitUntil(t, "the shipper to handle the four entries", 30*time.Second, func() bool {
		return w.consumed("shipper") == 2 && w.drained("shipper")
	})
	if n := w.shipments("%"); n != 1 {
		t.Fatalf("%d shipments for an order whose order.paid the stream holds twice, want 1", n)
	}
	m := scrape(t, s)
	if n := metric(m, "events_consumed_total", "result", "duplicate"); n != 2 {
		t.Fatalf("the shipper saw %v duplicates, want the 2 copies", n)
	}
}

// Two shippers on one group, with a claim idle of 50ms, so that each
// takes over messages the other still works on: 300 paid orders, every
// event twice in the stream. Exactly one shipment per order, every event
// processed exactly once across the two, nothing pending.
func drillConsumersRace(t *testing.T, w *evWorld) {
	const orders = 300
	// Both shippers read before the first event arrives, so that neither
	// has a head start.
	settings := []string{"SHIPPER_CLAIM_IDLE", "50ms", "SHIPPER_LEASE", "5s"}
	s1, s2 := w.shipper("racer-1", settings...), w.shipper("racer-2", settings...)
	start := time.Now()
	w.paidOrders("race", orders)
	if n := w.publish(w.stream, 100); n != 2*orders {
		t.Fatalf("published %d, want %d", n, 2*orders)
	}
	w.copyEntries(nil)
	waitUntil(t, "every event consumed and acknowledged", 90*time.Second, func() bool {
		return w.consumed("shipper") == 2*orders && w.drained("shipper")
	})
	if n := w.doubles("%"); n != 0 {
		t.Fatalf("%d orders shipped twice", n)
	}
	if n := w.shipments("%"); n != orders {
		t.Fatalf("%d shipments, want %d", n, orders)
	}
	m1, m2 := scrape(t, s1), scrape(t, s2)
	res := func(r string) (float64, float64) {
		return metric(m1, "events_consumed_total", "result", r), metric(m2, "events_consumed_total", "result", r)
	}
	p1, p2 := res("processed")
	d1, d2 := res("duplicate")
	b1, b2 := res("busy")
	if p1+p2 != 2*orders {
		t.Fatalf("processed %v + %v events, want %d exactly", p1, p2, 2*orders)
	}
	if p1 == 0 || p2 == 0 {
		t.Fatalf("one shipper did all the work (%v, %v): no race", p1, p2)
	}
	if d1+d2 < 2*orders {
		t.Fatalf("%v + %v duplicates, want at least the %d copies", d1, d2, 2*orders)
	}
	t.Logf("in %v: processed %v/%v, duplicates %v/%v, busy (claim held by the other) %v/%v, redis hits %v, postgres hits %v",
		time.Since(start).Round(time.Millisecond), p1, p2, d1, d2, b1, b2,
		metric(m1, "events_dedup_total", "layer", "redis", "result", "hit")+metric(m2, "events_dedup_total", "layer", "redis", "result", "hit"),
		metric(m1, "events_dedup_total", "layer", "postgres", "result", "hit")+metric(m2, "events_dedup_total", "layer", "postgres", "result", "hit"))
	// A takeover shows as a message met busy (the other still held the
	// event's claim) or as a repeat beyond the copies (the other had
	// finished but not yet acknowledged): without either, nothing raced.
	if b1+b2 == 0 && d1+d2 == 2*orders {
		t.Fatal("no message was taken over from the other shipper: the drill did not race")
	}
}

// The Redis done records are lost (DEL consumed:{shipper}:*) and every
// entry is added again: the consumed_events rows stop every repeat, and
// the shipper counts them as postgres hits. The control: with the rows
// gone too, the copies ship again and the same check sees the doubles.
func drillRedisDedupLost(t *testing.T, w *evWorld) {
	const orders = 20
	w.paidOrders("lost", orders)
	w.publish(w.stream, 100)
	s := w.shipper("shipper-1")
	waitUntil(t, "the events consumed", 30*time.Second, func() bool {
		return w.consumed("shipper") == 2*orders && w.drained("shipper")
	})
	if n := w.shipments("%"); n != orders {
		t.Fatalf("%d shipments, want %d", n, orders)
	}
	hits := func() float64 {
		return metric(scrape(t, s), "events_dedup_total", "group", "shipper", "layer", "postgres", "result", "hit")
	}
	if h := hits(); h != 0 {
		t.Fatalf("%v postgres hits before the records were lost", h)
	}
	dropRecords := func() int {
		ctx := ctxFor(t, time.Minute)
		keys, err := w.rdb.Keys(ctx, "consumed:{shipper}:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) > 0 {
			if err := w.rdb.Del(ctx, keys...).Err(); err != nil {
				t.Fatal(err)
			}
		}
		return len(keys)
	}
	if n := dropRecords(); n != 2*orders {
		t.Fatalf("%d done records dropped, want %d", n, 2*orders)
	}
	original := w.entryIDs()
	copies := w.copyEntries(nil)
	waitUntil(t, "the copies counted as postgres hits", 30*time.Second, func() bool {
		return w.drained("shipper") && hits() == float64(copies)
	})
	if n := w.shipments("%"); n != orders {
		t.Fatalf("%d shipments after the Redis records were lost and the events repeated, want %d", n, orders)
	}
	if n := w.doubles("%"); n != 0 {
		t.Fatalf("%d orders shipped twice", n)
	}

	// Control: both layers lost. The same check must see the doubles.
	if _, err := w.pool.Exec(ctxFor(t, time.Minute), `DELETE FROM consumed_events WHERE consumer_group = 'shipper'`); err != nil {
		t.Fatal(err)
	}
	dropRecords()
	paid := w.copyEntries(func(m redis.XMessage) bool { return isPaid(m) && original[m.ID] })
	waitUntil(t, "the unguarded copies shipped", 30*time.Second, func() bool {
		return w.drained("shipper") && w.shipments("%") == orders+paid
	})
	if n := w.doubles("%"); n != orders {
		t.Fatalf("control: with both dedup records gone the check sees %d doubles, want %d", n, orders)
	}
}

// entryIDs returns the set of the stream's entry ids.
func (w *evWorld) entryIDs() map[string]bool {
	w.t.Helper()
	msgs, err := w.rdb.XRange(ctxFor(w.t, time.Minute), w.stream, "-", "+").Result()
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range msgs {
		out[m.ID] = true
	}
	return out
}

// Flood settings; its sizes, floodEvents and floodCopies, are in
// long_off_test.go and long_on_test.go.
const (
	floodSeed = 20261201
	// floodFPBound is the bound on the measured false-positive rates of the
	// filters sized for floodEvents at 1%: generous, three times the rate
	// of the full filter (the rate met over the fill is a fifth of it).
	floodFPBound = 0.03
)

// flood is the flood's stream content: floodEvents order.paid events,
// floodCopies of them (drawn with a seeded RNG) copied once, the copies at
// random positions.
type flood struct {
	ids []string // the distinct event ids, in publication order
}

// buildFlood makes the floodEvents paid orders, publishes their order.paid
// events with the relay to a staging stream, and writes the flood to the
// world's stream.
func buildFlood(t *testing.T, w *evWorld) flood {
	t.Helper()
	w.paidOrders("flood", floodEvents)
	w.onlyPaid()
	const staging = "flood:staging"
	if n := w.publish(staging, 1000); n != floodEvents {
		t.Fatalf("published %d, want %d", n, floodEvents)
	}
	ctx := ctxFor(t, 2*time.Minute)
	msgs, err := w.rdb.XRange(ctx, staging, "-", "+").Result()
	if err != nil || len(msgs) != floodEvents {
		t.Fatalf("staging stream: %d entries, %v", len(msgs), err)
	}
	rng := rand.New(rand.NewPCG(floodSeed, floodSeed))
	var f flood
	entries := make([]map[string]any, 0, floodEvents+floodCopies)
	for _, m := range msgs {
		entries = append(entries, m.Values)
		f.ids = append(f.ids, m.Values["event_id"].(string))
	}
	for _, i := range rng.Perm(floodEvents)[:floodCopies] {
		pos := rng.IntN(len(entries) + 1)
		entries = append(entries, nil)
		copy(entries[pos+1:], entries[pos:])
		entries[pos] = msgs[i].Values
	}
	for from := 0; from < len(entries); from += 1000 {
		_, err := w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, v := range entries[from:min(from+1000, len(entries))] {
				p.XAdd(ctx, &redis.XAddArgs{Stream: w.stream, Values: v})
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := w.xlen(); n != floodEvents+floodCopies {
		t.Fatalf("flood stream: %d entries, want %d", n, floodEvents+floodCopies)
	}
	return f
}

// checkShippedOnce is the exact mode's safety check: no order reserved
// twice by the consumers named like, and every paid order reserved.
func checkShippedOnce(w *evWorld, like string, orders int) error {
	if n := w.doubles(like); n != 0 {
		return fmt.Errorf("%d orders have more than one shipment", n)
	}
	if n := w.count(`SELECT count(DISTINCT order_id) FROM shipments WHERE reserved_by LIKE $1`, like); n != orders {
		return fmt.Errorf("%d orders shipped, want %d", n, orders)
	}
	return nil
}

// approxResult is what an approximate consumer did with the flood.
type approxResult struct {
	skipped int     // events never processed: the filter's false positives
	twice   int     // events processed more than once
	rate    float64 // skipped / events: the false-positive rate met over the fill
	full    float64 // the false-positive rate of the filter once full, probed
}

// checkApprox is the approximate mode's check: the measured false-positive
// rates (met over the fill, and probed once full) within floodFPBound, and
// no event processed twice by a single consumer (a Bloom filter does not
// forget what it holds).
func checkApprox(r approxResult) error {
	if r.rate >= floodFPBound {
		return fmt.Errorf("false-positive rate %.3f%% (%d of %d events skipped), want below %.0f%%", 100*r.rate, r.skipped, floodEvents, 100*floodFPBound)
	}
	if r.full >= floodFPBound {
		return fmt.Errorf("false-positive rate of the full filter %.3f%%, want below %.0f%%", 100*r.full, 100*floodFPBound)
	}
	if r.twice != 0 {
		return fmt.Errorf("%d events processed twice by one consumer", r.twice)
	}
	return nil
}

// consumeApprox runs one approximate consumer in this process over the
// flood, in group, until the group has read and acknowledged every entry.
func consumeApprox(t *testing.T, w *evWorld, f flood, group string, filter events.Filter) approxResult {
	t.Helper()
	var mu sync.Mutex
	effects := map[string]int{}
	c, err := events.NewApproximate(w.rdb, filter, group, group+"-1", func(_ context.Context, e events.Event) error {
		mu.Lock()
		effects[e.ID]++
		mu.Unlock()
		return nil
	}, events.WithStream(w.stream), events.WithBlock(20*time.Millisecond), events.WithBatch(500))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, 3*time.Minute)
	if err := c.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	deadline := start.Add(2 * time.Minute)
	for !w.drained(group) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: the flood was not consumed within 2 minutes", group)
		}
		if _, err := c.Poll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	var r approxResult
	for _, id := range f.ids {
		switch n := effects[id]; {
		case n == 0:
			r.skipped++
		case n > 1:
			r.twice++
		}
	}
	r.rate = float64(r.skipped) / floodEvents
	took := time.Since(start)
	r.full = probe(t, ctx, filter, group)
	t.Logf("%s: %d of %d events skipped (false positives, measured rate %.3f%% over the fill; %.3f%% at full on %d fresh ids), %d processed twice, %d entries in %v",
		group, r.skipped, floodEvents, 100*r.rate, 100*r.full, floodEvents, r.twice, floodEvents+floodCopies, took.Round(time.Millisecond))
	return r
}

// probe measures the filter's false-positive rate as it stands: the
// fraction of floodEvents ids never added that it says it has seen.
func probe(t *testing.T, ctx context.Context, f events.Filter, group string) float64 {
	t.Helper()
	const workers = 4
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen, failed := 0, error(nil)
	for w := range workers {
		wg.Go(func() {
			n := 0
			for i := w; i < floodEvents; i += workers {
				ok, err := f.Seen(ctx, group, fmt.Sprintf("probe-%d/order.paid", i))
				if err != nil {
					mu.Lock()
					failed = err
					mu.Unlock()
					return
				}
				if ok {
					n++
				}
			}
			mu.Lock()
			seen += n
			mu.Unlock()
		})
	}
	wg.Wait()
	if failed != nil {
		t.Fatal(failed)
	}
	return float64(seen) / floodEvents
}

// expectedFillRate is the false-positive rate a first-seen event meets on
// average while n events fill a filter of that rate function: the mean of
// rate(i) for i from 0 to n-1.
func expectedFillRate(rate func(uint) float64, n int) float64 {
	s := 0.0
	for i := range n {
		s += rate(uint(i))
	}
	return s / float64(n)
}

// The flood: floodEvents order.paid events and floodCopies copies at
// random positions, consumed in exact mode by two shipper processes, then by
// approximate consumers with each filter, each mode its own group on the
// one stream; and the controls that show each check can fail.
func drillFlood(t *testing.T, w *evWorld) {
	built := time.Now()
	f := buildFlood(t, w)
	t.Logf("flood of %d entries (%d events, %d copies, seed %d) built in %v", floodEvents+floodCopies, floodEvents, floodCopies,
		floodSeed, time.Since(built).Round(time.Millisecond))

	t.Run("Exact", func(t *testing.T) {
		w := w.in(t)
		start := time.Now()
		settings := []string{"SHIPPER_CLAIM_IDLE", "1s", "SHIPPER_LEASE", "5s"}
		s1, s2 := w.shipper("flood-exact-1", settings...), w.shipper("flood-exact-2", settings...)
		waitUntil(t, "the flood consumed in exact mode", 150*time.Second, func() bool {
			return w.consumed("shipper") == floodEvents && w.drained("shipper")
		})
		took := time.Since(start)
		if err := checkShippedOnce(w, "flood-exact-%", floodEvents); err != nil {
			t.Fatal(err)
		}
		m1, m2 := scrape(t, s1), scrape(t, s2)
		processed := metric(m1, "events_consumed_total", "result", "processed") + metric(m2, "events_consumed_total", "result", "processed")
		if processed != floodEvents {
			t.Fatalf("%v events processed, want %d exactly", processed, floodEvents)
		}
		t.Logf("exact: %d entries in %v (%.0f events/s with two shipper processes): 0 orders with more than one shipment, every event processed once; duplicates %v",
			floodEvents+floodCopies, took.Round(time.Millisecond), float64(floodEvents+floodCopies)/took.Seconds(),
			metric(m1, "events_consumed_total", "result", "duplicate")+metric(m2, "events_consumed_total", "result", "duplicate"))
	})

	t.Run("NaiveControl", func(t *testing.T) {
		w := w.in(t)
		// A consumer that trusts delivery: one shipment per order.paid
		// entry. The exact mode's check must see every copy as a double.
		ctx := ctxFor(t, time.Minute)
		msgs, err := w.rdb.XRange(ctx, w.stream, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		var orderIDs, eventIDs []string
		for _, m := range msgs {
			if isPaid(m) {
				orderIDs = append(orderIDs, m.Values["order_id"].(string))
				eventIDs = append(eventIDs, m.Values["event_id"].(string))
			}
		}
		if _, err := w.pool.Exec(ctx, `INSERT INTO shipments (order_id, event_id, product_id, quantity, reserved_by)
SELECT o, e, '42', 1, 'flood-naive' FROM unnest($1::text[], $2::text[]) AS v(o, e)`, orderIDs, eventIDs); err != nil {
			t.Fatal(err)
		}
		err = checkShippedOnce(w, "flood-naive", floodEvents)
		if err == nil {
			t.Fatal("the check passed a consumer without deduplication")
		}
		if n := w.doubles("flood-naive"); n != floodCopies {
			t.Fatalf("the check saw %d doubles, want the %d copies", n, floodCopies)
		}
		t.Logf("naive consumer: %v", err)
	})

	t.Run("Approximate", func(t *testing.T) {
		w := w.in(t)
		mem, err := events.NewMemoryFilter(floodEvents, 0.01)
		if err != nil {
			t.Fatal(err)
		}
		red, err := events.NewRedisFilter(w.rdb, floodEvents, 0.01, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("filters sized for %d at 1%%: rate at full %.3f%%, expected over the fill %.3f%%", floodEvents,
			100*red.FalsePositiveRate(floodEvents), 100*expectedFillRate(red.FalsePositiveRate, floodEvents))
		for _, c := range []struct {
			group  string
			filter events.Filter
		}{{"approx-memory", mem}, {"approx-redis", red}} {
			if err := checkApprox(consumeApprox(t, w, f, c.group, c.filter)); err != nil {
				t.Errorf("%s: %v", c.group, err)
			}
		}
	})

	t.Run("UndersizedControl", func(t *testing.T) {
		w := w.in(t)
		// Filters sized for a twentieth of the events: the shared one
		// saturates and skips most events; the in-process one rolls its
		// generations and forgets early events, so their copies are
		// processed again. The same check must refuse both.
		const undersized = floodEvents / 20
		red, err := events.NewRedisFilter(w.rdb, undersized, 0.01, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkApprox(consumeApprox(t, w, f, "undersized-redis", red)); err == nil {
			t.Error("the check passed a saturated filter")
		} else {
			t.Logf("undersized redis filter: %v", err)
		}
		mem, err := events.NewMemoryFilter(undersized, 0.01)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkApprox(consumeApprox(t, w, f, "undersized-memory", mem)); err == nil {
			t.Error("the check passed a filter that forgets")
		} else {
			t.Logf("undersized memory filter: %v", err)
		}
	})
}

// The shipper does not migrate: on a database without the events tables
// it exits 1 at once, saying what to run, and without the database URL's
// password.
func drillShipperRefusesUnmigrated(t *testing.T, w *evWorld) {
	dsn := bedtest.NewDatabase(t, w.k.bed.Postgres) // empty
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, w.k.shipper)
	cmd.Env = []string{"ORDERS_DATABASE_URL=" + dsn, "ORDERS_EVENTS_REDIS_ADDR=" + w.addr, "SHIPPER_LISTEN=127.0.0.1:0"}
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 1 {
		t.Fatalf("the shipper on an unmigrated database: %v, %s", err, out)
	}
	if !strings.Contains(string(out), "ordersd migrate") || strings.Contains(string(out), dsn) ||
		strings.Contains(string(out), ":"+testbed.PostgresPassword+"@") {
		t.Fatalf("the shipper's refusal: %s", out)
	}
	var tables int
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&tables); err != nil || tables != 0 {
		t.Fatalf("the shipper created %d tables (%v): it must not migrate", tables, err)
	}
	t.Logf("refused: %s", strings.TrimSpace(string(out)))
}
