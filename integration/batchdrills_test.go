package integration_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/devtools/audit"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/internal/failpoint"
	"github.com/quorumlock/quorumlock/quorum"
)

// holdLock takes the stock lock key from the test itself, on the drill's
// masters, and returns its release.
func (d *drill) holdLock(key string) (release func()) {
	t := d.t
	t.Helper()
	var clients []redis.UniversalClient
	for _, c := range bedtest.RedisClients(t, d.bed) {
		clients = append(clients, c)
	}
	l, err := quorum.New(clients, quorum.WithTTL(time.Minute), quorum.WithNodeTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lease, err := l.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return func() {
		_ = lease.Unlock(context.Background())
		_ = l.Close()
	}
}

// waitSubscribed waits until a Lock call somewhere waits for key: the
// masters have a subscriber on its release channel.
func (d *drill) waitSubscribed(key string) {
	t := d.t
	t.Helper()
	ch := quorum.ReleaseChannelPrefix + key
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := 0
		for _, c := range bedtest.RedisClients(t, d.bed) {
			if m, err := c.PubSubNumSub(context.Background(), ch).Result(); err == nil && m[ch] > 0 {
				n++
			}
		}
		if n >= len(d.bed.Redis)/2+1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Lock call waits for %s", key)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// holdRow keeps product's stock row locked from the test's own
// transaction until release, and waits until a transaction waits on it.
func (d *drill) holdRow(product string, waiter func()) (release func()) {
	t := d.t
	t.Helper()
	ctx := context.Background()
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM product_stock WHERE product_id = $1 FOR UPDATE`, product); err != nil {
		t.Fatal(err)
	}
	waiter()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		err := d.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		if err == nil && n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no transaction waits on the stock row of %s (%v)", product, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return func() { _ = tx.Rollback(ctx) }
}

// queueBatch has A place one order of products[i] for user i, in order:
// the first leads a batch that waits (for the stock lock, which the test
// holds, or with lockless for the product's stock row, which the test
// locks), the others queue behind it; then the test lets go. The leader's
// batch is itself alone; the others are placed after it, in one batch when
// they share no product with it (the quiet batch of several products,
// under one lease on all of them with the lock on). It returns the
// answers (an error where A died first).
func (d *drill) queueBatch(a *daemon, products []string, lockless bool) ([]reply, []error) {
	t := d.t
	t.Helper()
	n := len(products)
	replies, errs := make([]reply, n), make([]error, n)
	var wg sync.WaitGroup
	send := func(i int) {
		wg.Go(func() { replies[i], errs[i] = d.create(a, batchUser(products, i), "k", buy(products[i], 1)) })
	}
	var release func()
	if lockless {
		release = d.holdRow(products[0], func() { send(0) })
	} else {
		release = d.holdLock("stock:" + products[0])
		send(0)
		d.waitSubscribed("stock:" + products[0])
	}
	for i := 1; i < n; i++ {
		send(i)
	}
	deadline := time.Now().Add(30 * time.Second)
	for a.metric(t, d, "orders_queued_requests") != float64(n-1) {
		if time.Now().After(deadline) {
			t.Fatalf("%v requests queued on A, want %d", a.metric(t, d, "orders_queued_requests"), n-1)
		}
		time.Sleep(20 * time.Millisecond)
	}
	release()
	wg.Wait()
	return replies, errs
}

// batchUser is the user of request i of a queued batch.
func batchUser(products []string, i int) string { return fmt.Sprintf("drill-%s-%d", products[i], i) }

// (j) An ordersd SIGKILLed in the middle of a batch of several products,
// after the second batch's decrement and before its commit: the
// transaction rolls back whole, and every order of the batch, retried on
// another ordersd, is placed once.
func drillBatchKilled(t *testing.T, k *drillKit) {
	d := newDrill(t, k, map[string]int64{"i": 10, "i2": 10, "i3": 10, "i4": 10, "i5": 10})
	a := d.start("A", map[string]string{failpoint.EnvVar: string(failpoint.AfterDecrement) + "=kill@2"})
	products := []string{"i", "i2", "i3", "i4", "i5"}
	replies, errs := d.batchKilled(a, products, false)
	d.retryKilled(products, replies, errs)
}

// (l) The same as (j), with ORDERS_LOCK=auto: the batch of quiet products takes
// no lock, Postgres taking their fences; the first batch waits on its
// stock row, which the test locks.
func drillQuietBatchKilled(t *testing.T, k *drillKit) {
	d := newDrill(t, k, map[string]int64{"k": 10, "k2": 10, "k3": 10, "k4": 10})
	a := d.start("A", map[string]string{failpoint.EnvVar: string(failpoint.AfterDecrement) + "=kill@2", "ORDERS_LOCK": "auto"})
	products := []string{"k", "k2", "k3", "k4"}
	replies, errs := d.batchKilled(a, products, true)
	// A is dead: its log is complete. The kill may come before the
	// leader's order is logged (its answer races the second batch, see
	// retryKilled); then this run cannot tell, and says so.
	line, found, _, _ := a.log.find(func(l string) bool { return strings.Contains(l, `"user":"drill-k-0"`) })
	switch {
	case !found:
		t.Log("A was killed before it logged the leader's order: the no-lock check is left to other runs")
	case strings.Contains(line, `"lock":`):
		t.Errorf("the leader's quiet order took the lock: %s", line)
	}
	d.retryKilled(products, replies, errs)
}

// batchKilled queues products on A (see queueBatch) and waits for A to
// die at its second batch's decrement: the leader's batch committed, the
// second rolled back whole.
func (d *drill) batchKilled(a *daemon, products []string, lockless bool) ([]reply, []error) {
	t := d.t
	replies, errs := d.queueBatch(a, products, lockless)
	a.waitKilled(t)
	for i := 1; i < len(products); i++ {
		if errs[i] == nil {
			t.Fatalf("request %d of the killed batch was answered: %v", i, replies[i])
		}
	}
	for _, p := range products[1:] {
		if s := d.stock(p); s != d.initial[p] {
			t.Fatalf("stock of %s %d after the crash, want %d: the killed batch's decrements must roll back", p, s, d.initial[p])
		}
	}
	if s := d.stock(products[0]); s != d.initial[products[0]]-1 {
		t.Fatalf("stock of %s %d after the crash, want %d: the leader's batch stays", products[0], s, d.initial[products[0]]-1)
	}
	return replies, errs
}

// retryKilled retries every request of a killed batch on a new ordersd B
// and checks that each is placed once. The leader's batch committed
// before the second one began, but its answer races the kill: a loaded
// machine may kill A before the 201 reaches the client. Then its retry
// must replay that order.
func (d *drill) retryKilled(products []string, replies []reply, errs []error) {
	t := d.t
	first := 1
	if errs[0] != nil {
		t.Logf("the leader's own batch committed, its answer lost to the kill (%v): retried below", errs[0])
		first = 0
	} else if replies[0].Status != http.StatusCreated {
		t.Fatalf("the leader's own batch: %v", replies[0])
	}
	b := d.start("B", map[string]string{"ORDERS_PROCESSING_LEASE": "5s"})
	var resps []audit.Response
	if first == 1 {
		resps = append(resps, response(batchUser(products, 0), "k", replies[0]))
	}
	for i := first; i < len(products); i++ {
		user := batchUser(products, i)
		r := d.untilFinal("a retry of the killed batch", 40*time.Second, func() (reply, error) { return d.create(b, user, "k", buy(products[i], 1)) })
		if r.Status != http.StatusCreated {
			t.Fatalf("retry of %s: %v", user, r)
		}
		resps = append(resps, response(user, "k", r))
	}
	d.verdict(len(products), resps)
}

// (k) An ordersd SIGSTOPped in the middle of a batch of several products,
// its transaction open with its rows locked, its lease running out:
// another ordersd's order of one of those products waits on the rows,
// nothing is sold twice, and when the frozen one goes on, its batch
// commits or is refused whole, and every request gets its answer.
func drillBatchStopped(t *testing.T, k *drillKit) {
	d := newDrill(t, k, map[string]int64{"j": 1, "j2": 2, "j3": 1})
	a := d.start("A", map[string]string{failpoint.EnvVar: string(failpoint.AfterDecrement) + "=stop@2", "ORDERS_LOCK_TTL": "2s",
		"ORDERS_NODE_TIMEOUT": "500ms", "ORDERS_PROCESSING_LEASE": "40s"})
	done := make(chan struct{})
	var replies []reply
	var errs []error
	products := []string{"j", "j2", "j3"}
	go func() { replies, errs = d.queueBatch(a, products, false); close(done) }()
	a.waitFailpoint(t, failpoint.AfterDecrement)
	a.waitStopped(t)
	b := d.start("B", map[string]string{"ORDERS_LOCK_WAIT": "10s", "ORDERS_PROCESSING_LEASE": "30s"})
	other := make(chan reply, 1)
	go func() {
		other <- d.untilFinal("B's order while A is frozen", 60*time.Second, func() (reply, error) { return d.create(b, "drill-j-b", "k", buy("j2", 1)) })
	}()
	// A's lease (2s) runs out while it is frozen, and B takes the lock;
	// B's transaction then waits on the rows A's open one holds.
	deadline := time.Now().Add(30 * time.Second)
	for b.metric(t, d, `quorumlock_acquire_total{result="acquired"}`) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("B never took the lock while A was frozen")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	<-done
	rb := <-other
	resps := []audit.Response{response("drill-j-b", "k", rb)}
	created := 0
	for i, r := range replies {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		user := batchUser(products, i)
		if r.Status != http.StatusCreated { // refused whole (a 503): its retry is placed now
			r = d.untilFinal("a retry of the frozen batch", 40*time.Second, func() (reply, error) { return d.create(b, user, "k", buy(products[i], 1)) })
		}
		if r.Status == http.StatusCreated {
			created++
		}
		resps = append(resps, response(user, "k", r))
	}
	if rb.Status == http.StatusCreated {
		created++
	}
	if left := []int64{d.stock("j"), d.stock("j2"), d.stock("j3")}; created != 4 || left[0]+left[1]+left[2] != 0 {
		t.Fatalf("%d orders created, stock %v; want 4 and none left", created, left)
	}
	d.verdict(4, resps)
}
