package integration_test

// The order path on a Postgres HA group (pg_auto_failover: a monitor, a
// primary and a synchronous standby): three ordersd processes on the
// group's multi-host URI, under load, while the primary fails.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quorumlock/quorumlock/devtools/audit"
	"github.com/quorumlock/quorumlock/devtools/fakepay"
	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/orders/store"
	"github.com/quorumlock/quorumlock/quorum"
)

// haStock is the stock of each product of the failover runs: more than a
// run sells.
const haStock = 100_000

// haProducts are the products of the failover runs.
var haProducts = []string{"ha-1", "ha-2", "ha-3", "ha-4"}

// TestPostgresFailover: buyers of single products and of carts, and
// triple-clickers, order through three ordersd on the group's URI and pay
// half of their orders, while the primary fails, one fault after the
// other on one group (haFaults: SIGKILL and a switchover in make test;
// with -tags chaos also SIGSTOP past the failover and a partition from
// everything), once per seed of haSeeds (each its own clients, keys and
// fault timings): the standby takes over, and the old primary comes back
// as a standby that refuses writes. A shipper consumes the order events
// throughout. After each seed, against the surviving primary: every 201
// any client saw is an order with the same lines, one order per key,
// stock balances; every event in the stream, every order the shipper
// shipped and every charge at fakepay names an order that exists, one
// charge per order; and each fence counter, read before and after every
// failover, only went up. It reports, per fault, the time to the first
// 201 of a request sent after it that placed an order (not a replay from
// Redis), and the 503s (each with a Retry-After) and timeouts clients saw.
func TestPostgresFailover(t *testing.T) {
	g, d, ds := startHAOrders(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	var all []audit.Response
	for _, seed := range haSeedList(t) {
		rng := rand.New(rand.NewPCG(seed, 29))
		ld := startHALoad(d, ds, haMix{buyers: 8, carts: 4, clickers: 4, newcomers: 2}, seed)
		ld.waitCreated(t, 50, 30*time.Second)
		for _, f := range haFaults {
			time.Sleep(time.Duration(rng.IntN(2000)) * time.Millisecond) // the fault's moment in the batches
			before := fenceCounters(t, d.pool)
			haFault(ctx, t, g, ld, f)
			d.pool.Reset() // its connections to the old primary died with it
			fencesOnlyRose(t, before, fenceCounters(t, d.pool))
			ld.waitCreated(t, ld.created()+50, 30*time.Second)
		}
		responses, tally := ld.stop(t, d)
		t.Logf("seed %d: load: %s", seed, tally)
		if len(ld.odd) > 0 {
			t.Logf("answers of an unexpected status: %s", firstLines(strings.Join(ld.odd, "\n"), 5))
		}
		if tally.timeouts > 0 || tally.noRetryAfter > 0 {
			t.Errorf("clients hung (%d timeouts) or got a 503 without Retry-After (%d): %s", tally.timeouts, tally.noRetryAfter, strings.Join(ld.hung, "; "))
			haWarnings(t, ds)
		}
		all = append(all, responses...)
		d.waitDrained(t, time.Minute)
		d.haVerdict(all)
	}
}

// startHAOrders starts the world of a failover run: a bed of five
// masters and a Postgres HA group, three ordersd (ORDERS_LOCK=auto) on the
// group's URI and a shipper.
func startHAOrders(t *testing.T) (*testbed.PostgresGroup, *drill, []*daemon) {
	t.Helper()
	k, g := startHAKit(t)
	d := newHADrill(t, k, g)
	var ds []*daemon
	for i := range 3 {
		ds = append(ds, d.start(fmt.Sprintf("ordersd-%d", i), map[string]string{"ORDERS_LOCK": "auto"}))
	}
	d.startHAShipper(k.shipper)
	return g, d, ds
}

// haSeedList is haSeeds, or the seeds QUORUMLOCK_HA_SEEDS lists (comma
// separated), to repeat one run.
func haSeedList(t *testing.T) []uint64 {
	env := os.Getenv("QUORUMLOCK_HA_SEEDS")
	if env == "" {
		return haSeeds
	}
	var out []uint64
	for _, f := range strings.Split(env, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
		if err != nil {
			t.Fatalf("QUORUMLOCK_HA_SEEDS=%q: %v", env, err)
		}
		out = append(out, n)
	}
	return out
}

// haWarnings logs what the daemons said beyond their access lines, for a
// failure message.
func haWarnings(t *testing.T, ds []*daemon) {
	t.Helper()
	for _, p := range ds {
		p.log.mu.Lock()
		for _, line := range p.log.lines {
			if !strings.Contains(line, `"level":"INFO"`) || strings.Contains(line, `"duration":`) && !strings.Contains(line, `"status":201`) && !strings.Contains(line, `"status":503`) {
				t.Logf("%s: %s", p.name, line)
			}
		}
		p.log.mu.Unlock()
	}
}

// haFault fails the primary the way f says, waits for an order placed
// after it, heals, waits for the group to be steady again, and checks
// that the old primary refuses writes.
func haFault(ctx context.Context, t *testing.T, g *testbed.PostgresGroup, ld *haLoad, f string) {
	t.Helper()
	victim, err := g.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	at, unavailable := time.Now(), ld.unavailable()
	inject := map[string]func(context.Context) error{"kill": victim.Kill, "pause": victim.Pause,
		"partition": victim.Partition, "switchover": g.Switchover}[f]
	heal := map[string]func(context.Context) error{"kill": victim.Restart, "pause": victim.Resume,
		"partition": victim.Heal, "switchover": func(context.Context) error { return nil }}[f]
	if err := inject(ctx); err != nil {
		t.Fatalf("%s: %v", f, err)
	}
	// The first 201 counts from the moment the fault is in place (the
	// processes dead or stopped, the proxies cut): a request sent a moment
	// earlier may still commit on the old primary. A switchover returns
	// once it is over, so it counts from its start.
	hit := time.Now()
	if f == "switchover" {
		hit = at
	}
	reached := reachPrimary(ctx, g.URI(), hit)
	first, ok := ld.firstCreatedAfter(hit, 60*time.Second)
	if err := heal(context.WithoutCancel(ctx)); err != nil {
		t.Fatalf("%s: heal: %v", f, err)
	}
	if !ok {
		t.Fatalf("%s: no order placed within 60s of the fault on %s; monitor: %v", f, victim.Name(), haEvents(ctx, g))
	}
	if err := g.WaitSteady(ctx); err != nil {
		t.Fatalf("%s: the old primary did not rejoin: %v; monitor: %v", f, err, haEvents(ctx, g))
	}
	t.Logf("%s of the primary %s: the first order placed by a request sent after it %v later (the monitor saw a new primary %s; a new connection through the URI first reached a primary %s); the longest stretch without an order placed, from the fault to the group steady again, %v; %d 503s",
		f, victim.Name(), first.Sub(hit).Round(time.Millisecond), promotedAfter(ctx, g, victim, hit), <-reached,
		ld.longestGap(at, time.Now()).Round(time.Millisecond), ld.unavailable()-unavailable)
	refusesWrites(t, victim.DSN())
}

// reachPrimary opens a new connection through uri every 200 ms from now
// until one reaches a primary (at most 60 s), and sends how long after at
// that was.
func reachPrimary(ctx context.Context, uri string, at time.Time) <-chan string {
	out := make(chan string, 1)
	go func() {
		for time.Since(at) < time.Minute && ctx.Err() == nil {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			conn, err := pgx.Connect(cctx, uri)
			if err == nil {
				var standby bool
				err = conn.QueryRow(cctx, "SELECT pg_is_in_recovery()").Scan(&standby)
				_ = conn.Close(cctx)
				if err == nil && !standby {
					cancel()
					out <- time.Since(at).Round(time.Millisecond).String() + " after it"
					return
				}
			}
			cancel()
			time.Sleep(200 * time.Millisecond)
		}
		out <- "at no time within a minute"
	}()
	return out
}

// promotedAfter says when, after at, the monitor first saw a node other
// than old report itself a primary (wait_primary or primary), from its
// event log.
func promotedAfter(ctx context.Context, g *testbed.PostgresGroup, old *testbed.PostgresHANode, at time.Time) string {
	for _, e := range haEvents(ctx, g) {
		if e.Node != old.Name() && e.Time.After(at) && (e.Reported == "wait_primary" || e.Reported == "primary") {
			return e.Time.Sub(at).Round(time.Millisecond).String() + " after it"
		}
	}
	return "at no time in its last events"
}

// startHAKit starts a bed of five masters and a Postgres HA group, and
// builds ordersd and the shipper.
func startHAKit(t *testing.T) (*haKit, *testbed.PostgresGroup) {
	t.Helper()
	k := &haKit{}
	built := make(chan error, 2)
	go func() {
		var err error
		k.bin, err = builds.path("github.com/quorumlock/quorumlock/cmd/ordersd")
		built <- err
	}()
	go func() {
		var err error
		k.shipper, err = builds.path("github.com/quorumlock/quorumlock/cmd/shipper")
		built <- err
	}()
	k.bed = bedtest.Start(t, testbed.Options{Redis: 5, PostgresHA: true})
	for _, n := range k.bed.Redis {
		c := n.Admin()
		err := quorum.TrustNode(context.Background(), c)
		_ = c.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := errors.Join(<-built, <-built); err != nil {
		t.Fatal(err)
	}
	return k, k.bed.PostgresHA
}

// haKit is the drills' kit with the shipper built too.
type haKit struct {
	drillKit
	shipper string
}

// newHADrill is a drill on the group's main database, through its
// multi-host URI: migrated, with haProducts stocked.
func newHADrill(t *testing.T, k *haKit, g *testbed.PostgresGroup) *drill {
	t.Helper()
	ctx := context.Background()
	if _, err := store.MigrateDSN(ctx, g.URI()); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, g.URI())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st, err := store.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	initial := map[string]int64{}
	for _, p := range haProducts {
		if err := st.SeedProduct(ctx, p, haStock, 1999); err != nil {
			t.Fatal(err)
		}
		initial[p] = haStock
	}
	pay, err := fakepay.New()
	if err != nil {
		t.Fatal(err)
	}
	paySrv := httptest.NewServer(pay.Handler())
	t.Cleanup(func() { paySrv.Close(); _ = pay.Close() })
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	t.Cleanup(tr.CloseIdleConnections)
	return &drill{t: t, bed: k.bed, bin: k.bin, dsn: g.URI(), pool: pool, st: st, pay: pay, payURL: paySrv.URL,
		client: &http.Client{Transport: tr, Timeout: 20 * time.Second}, initial: initial}
}

// haVerdict runs the checkers on the orders the surviving primary holds,
// read through the URI, and on the effects of the run (haEffects).
func (d *drill) haVerdict(responses []audit.Response) {
	d.t.Helper()
	stock := map[string]audit.Stock{}
	for p, n := range d.initial {
		stock[p] = audit.Stock{Initial: n, Final: d.stock(p)}
	}
	rows := d.orders()
	v := audit.Orders(stock, rows, responses)
	effects := d.haEffects(d.t)
	e := audit.Effects(rows, effects)
	if !v.OK() || !e.OK() {
		d.haDiagnose(v, e)
		d.t.Fatalf("checker: %s; effects (%s): %s", firstLines(v.String(), 8), audit.EffectKinds(effects), firstLines(e.String(), 8))
	}
	d.t.Logf("checker: %v; effects (%s): %v", v, audit.EffectKinds(effects), e)
}

// haDiagnose says, for a failed verdict, what each data node holds: its
// role, its orders, and whether it has the first orders the checker
// missed, read on each node alone.
func (d *drill) haDiagnose(reports ...audit.Report) {
	var missing []string
	for _, r := range reports {
		for _, x := range r.Violations {
			for _, f := range strings.FieldsFunc(x.Detail, func(c rune) bool { return c == '"' || c == ' ' || c == ',' || c == '(' }) {
				if strings.HasPrefix(f, "ord_") && len(missing) < 5 && !slices.Contains(missing, f) {
					missing = append(missing, f)
				}
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, n := range d.bed.PostgresHA.Nodes {
		conn, err := pgx.Connect(ctx, n.DSN())
		if err != nil {
			d.t.Logf("%s: %v", n.Name(), err)
			continue
		}
		var standby bool
		var orders, found int
		err = conn.QueryRow(ctx, "SELECT pg_is_in_recovery(), (SELECT count(*) FROM orders), (SELECT count(*) FROM orders WHERE order_id = ANY($1))", missing).Scan(&standby, &orders, &found)
		d.t.Logf("%s: standby %v, %d orders, %d of the missed %v (%v)", n.Name(), standby, orders, found, missing, err)
		_ = conn.Close(ctx)
	}
	d.t.Logf("monitor: %v", haEvents(ctx, d.bed.PostgresHA))
	for _, n := range d.bed.PostgresHA.Nodes {
		d.t.Logf("%s's log, its role changes and released commits:\n%s", n.Name(), roleLines(filepath.Join(n.Dir(), "pg_autoctl.log")))
	}
}

// roleLines are the lines of a data node's log that tell its role changes
// and the commits whose wait for the standby ended without it (at most the
// last 80).
func roleLines(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		low := strings.ToLower(l)
		for _, w := range []string{"synchronous", "transition", "promot", "demot", "drain", "terminat", "rewind", "canceling", "committed locally", "fast shutdown", "ready to accept"} {
			if strings.Contains(low, w) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out[max(0, len(out)-80):], "\n")
}

// refusesWrites checks that the node at dsn, alone, takes no write.
func refusesWrites(t *testing.T, dsn string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to the old primary: %v", err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE TABLE split_brain_probe (x int)")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "25006" {
		t.Fatalf("a write on the old primary: %v, want read_only_sql_transaction (25006)", err)
	}
}

// fenceCounters reads every fence counter.
func fenceCounters(t *testing.T, pool *pgxpool.Pool) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := pool.Query(ctx, "SELECT resource, value FROM fence_counters")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	var key string
	var v int64
	_, err = pgx.ForEachRow(rows, []any{&key, &v}, func() error { out[key] = v; return nil })
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// fencesOnlyRose checks that no counter read before is lower after.
func fencesOnlyRose(t *testing.T, before, after map[string]int64) {
	t.Helper()
	for k, v := range before {
		if after[k] < v {
			t.Errorf("fence counter %s went back: %d before the failover, %d after", k, v, after[k])
		}
	}
	t.Logf("fence counters: %d before, %d after", len(before), len(after))
}

// haEvents is the monitor's last events, for a failure message.
func haEvents(ctx context.Context, g *testbed.PostgresGroup) []testbed.Event {
	ev, _ := g.Events(context.WithoutCancel(ctx), 20)
	return ev
}
