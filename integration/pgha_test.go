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
	"slices"
	"strings"
	"sync"
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

// TestPostgresFailover: buyers and triple-clickers order through three
// ordersd on the group's URI while the primary fails, one fault after the
// other on one group (haFaults: SIGKILL and a switchover in make test;
// with -tags chaos also SIGSTOP past the failover and a partition from
// everything): the standby takes over, and the old primary comes back as
// a standby that refuses writes. Every 201 any client saw is an order, one
// order per key, stock balances, and every fence counter only went up. It
// reports, per fault, the time to the first 201 of a request sent after
// it that placed an order (not a replay from Redis), and the 503s (each
// with a Retry-After) and timeouts clients saw.
func TestPostgresFailover(t *testing.T) {
	k, g := startHAKit(t)
	d := newHADrill(t, k, g)
	var ds []*daemon
	for i := range 3 {
		ds = append(ds, d.start(fmt.Sprintf("ordersd-%d", i), map[string]string{"ORDERS_LOCK": "auto"}))
	}
	ld := startHALoad(d, ds, 12, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ld.waitCreated(t, 50, 30*time.Second)
	before := fenceCounters(t, d.pool)
	for _, f := range haFaults {
		haFault(ctx, t, g, ld, f)
		ld.waitCreated(t, ld.created()+50, 30*time.Second)
	}
	responses, tally := ld.stop(t, d)
	t.Logf("load: %s", tally)
	if tally.timeouts > 0 || tally.noRetryAfter > 0 {
		t.Errorf("clients hung (%d timeouts) or got a 503 without Retry-After (%d): %s", tally.timeouts, tally.noRetryAfter, strings.Join(ld.hung, "; "))
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
	d.pool.Reset() // its connections to the old primary died with it
	fencesOnlyRose(t, before, fenceCounters(t, d.pool))
	d.haVerdict(responses)
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
	at := time.Now()
	inject := map[string]func(context.Context) error{"kill": victim.Kill, "pause": victim.Pause,
		"partition": victim.Partition, "switchover": g.Switchover}[f]
	heal := map[string]func(context.Context) error{"kill": victim.Restart, "pause": victim.Resume,
		"partition": victim.Heal, "switchover": func(context.Context) error { return nil }}[f]
	if err := inject(ctx); err != nil {
		t.Fatalf("%s: %v", f, err)
	}
	first, ok := ld.firstCreatedAfter(at, 60*time.Second)
	if err := heal(context.WithoutCancel(ctx)); err != nil {
		t.Fatalf("%s: heal: %v", f, err)
	}
	if !ok {
		t.Fatalf("%s: no order placed within 60s of the fault on %s; monitor: %v", f, victim.Name(), haEvents(ctx, g))
	}
	if err := g.WaitSteady(ctx); err != nil {
		t.Fatalf("%s: the old primary did not rejoin: %v; monitor: %v", f, err, haEvents(ctx, g))
	}
	t.Logf("%s of the primary %s: the first order placed by a request sent after it %v later; the longest stretch without an order placed, from the fault to the group steady again, %v",
		f, victim.Name(), first.Sub(at).Round(time.Millisecond), ld.longestGap(at, time.Now()).Round(time.Millisecond))
	refusesWrites(t, victim.DSN())
}

// startHAKit starts a bed of five masters and a Postgres HA group, and
// builds ordersd.
func startHAKit(t *testing.T) (*drillKit, *testbed.PostgresGroup) {
	t.Helper()
	k := &drillKit{}
	built := make(chan error, 1)
	go func() {
		var err error
		k.bin, err = builds.path("github.com/quorumlock/quorumlock/cmd/ordersd")
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
	if err := <-built; err != nil {
		t.Fatal(err)
	}
	return k, k.bed.PostgresHA
}

// newHADrill is a drill on the group's main database, through its
// multi-host URI: migrated, with haProducts stocked.
func newHADrill(t *testing.T, k *drillKit, g *testbed.PostgresGroup) *drill {
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

// haVerdict runs the checker on the orders the surviving primary holds,
// read through the URI.
func (d *drill) haVerdict(responses []audit.Response) {
	d.t.Helper()
	stock := map[string]audit.Stock{}
	for p, n := range d.initial {
		stock[p] = audit.Stock{Initial: n, Final: d.stock(p)}
	}
	v := audit.Orders(stock, d.orders(), responses)
	if !v.OK() {
		d.t.Fatalf("checker: %v", v)
	}
	d.t.Logf("checker: %v", v)
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

// haTally counts what the load's clients saw.
type haTally struct {
	created, conflicts, unavailable, noRetryAfter, timeouts, other int
}

func (h haTally) String() string {
	return fmt.Sprintf("%d created, %d 409, %d 503 (%d without Retry-After), %d timeouts, %d other",
		h.created, h.conflicts, h.unavailable, h.noRetryAfter, h.timeouts, h.other)
}

// haLoad is the load of a failover run: buyers, each ordering one product
// per key and retrying the key until a final answer, and triple-clickers,
// each sending its key three times at once to three instances.
type haLoad struct {
	d    *drill
	ds   []*daemon
	quit chan struct{}
	wg   sync.WaitGroup

	mu        sync.Mutex
	responses []audit.Response
	at        []haCreated // every 201 that placed an order
	tally     haTally
	hung      []string // the attempts that got no answer
	changed   chan struct{}
}

// haCreated is one 201 that placed an order (not a replay): when its
// attempt was sent and when it came back.
type haCreated struct{ sent, answered time.Time }

// startHALoad starts buyers buyers and clickers triple-clickers.
func startHALoad(d *drill, ds []*daemon, buyers, clickers int) *haLoad {
	l := &haLoad{d: d, ds: ds, quit: make(chan struct{}), changed: make(chan struct{})}
	for i := range buyers + clickers {
		l.wg.Add(1)
		go l.client(fmt.Sprintf("ha-user-%d", i), i >= buyers, uint64(i))
	}
	return l
}

// client orders until the load stops (at most 100000 keys).
func (l *haLoad) client(user string, clicker bool, seed uint64) {
	defer l.wg.Done()
	rng := rand.New(rand.NewPCG(seed, 7))
	for n := 0; n < 100_000; n++ {
		select {
		case <-l.quit:
			return
		default:
		}
		key := fmt.Sprintf("%s-k%d", user, n)
		body := buy(haProducts[rng.IntN(len(haProducts))], 1)
		if !clicker {
			l.untilFinal(user, key, body, n)
			continue
		}
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Add(1)
			go func() { defer wg.Done(); l.untilFinal(user, key, body, n+i) }()
		}
		wg.Wait()
	}
}

// untilFinal sends key until a final answer (at most 200 tries, waiting
// Retry-After's worth, 200ms, between them), and records it.
func (l *haLoad) untilFinal(user, key, body string, turn int) {
	for try := 0; try < 200; try++ {
		sent := time.Now()
		p := l.ds[(turn+try)%len(l.ds)]
		r, err := l.d.create(p, user, key, body)
		if err != nil {
			l.mu.Lock()
			l.hung = append(l.hung, fmt.Sprintf("%s %s to %s at %s: %v", user, key, p.name, sent.Format("15:04:05.000"), err))
			l.mu.Unlock()
		}
		if l.record(user, key, r, err, sent) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// record counts one answer and reports whether it was final.
func (l *haLoad) record(user, key string, r reply, err error, sent time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err != nil:
		l.tally.timeouts++
		return false
	case r.Status == http.StatusServiceUnavailable || r.Status == http.StatusAccepted:
		l.tally.unavailable++
		if r.Status == http.StatusServiceUnavailable && r.Header.Get("Retry-After") == "" {
			l.tally.noRetryAfter++
		}
		return false
	case r.Status == http.StatusCreated:
		l.tally.created++
		if !r.replayed() { // a replay comes from Redis, not from a primary
			l.at = append(l.at, haCreated{sent: sent, answered: time.Now()})
		}
		close(l.changed)
		l.changed = make(chan struct{})
	case r.Status == http.StatusConflict:
		l.tally.conflicts++
	default:
		l.tally.other++
	}
	l.responses = append(l.responses, response(user, key, r))
	return true
}

// created is the number of 201s so far.
func (l *haLoad) created() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tally.created
}

// waitCreated waits up to d for n 201s.
func (l *haLoad) waitCreated(t *testing.T, n int, d time.Duration) {
	t.Helper()
	if _, ok := l.waitFor(d, func() bool { return l.tally.created >= n }); !ok {
		t.Fatalf("%d 201s within %v, want %d", l.created(), d, n)
	}
}

// firstCreatedAfter waits up to d for a 201 of an attempt sent after at,
// and returns when it was answered.
func (l *haLoad) firstCreatedAfter(at time.Time, d time.Duration) (time.Time, bool) {
	return l.waitFor(d, func() bool {
		return slices.ContainsFunc(l.at, func(c haCreated) bool { return c.sent.After(at) })
	}, func() time.Time {
		var first time.Time
		for _, c := range l.at {
			if c.sent.After(at) && (first.IsZero() || c.answered.Before(first)) {
				first = c.answered
			}
		}
		return first
	})
}

// longestGap is the longest stretch between from and to with no order
// placed: from from to the first, and between two in a row.
func (l *haLoad) longestGap(from, to time.Time) time.Duration {
	l.mu.Lock()
	var at []time.Time
	for _, c := range l.at {
		if c.answered.After(from) && c.answered.Before(to) {
			at = append(at, c.answered)
		}
	}
	l.mu.Unlock()
	slices.SortFunc(at, time.Time.Compare)
	longest, last := time.Duration(0), from
	for _, a := range at {
		longest, last = max(longest, a.Sub(last)), a
	}
	return longest
}

// waitFor waits up to d until cond (under mu) holds, and returns what
// when (under mu) gives, if given.
func (l *haLoad) waitFor(d time.Duration, cond func() bool, when ...func() time.Time) (time.Time, bool) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		ok, ch := cond(), l.changed
		var at time.Time
		if ok && len(when) > 0 {
			at = when[0]()
		}
		l.mu.Unlock()
		if ok {
			return at, true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return time.Time{}, false
		}
	}
}

// stop ends the load (each client finishes its key) and returns every
// final answer and the tally.
func (l *haLoad) stop(t *testing.T, d *drill) ([]audit.Response, haTally) {
	t.Helper()
	close(l.quit)
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the load's clients did not stop within 2m")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.responses, l.tally
}
