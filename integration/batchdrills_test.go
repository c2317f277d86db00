package integration_test

import (
	"context"
	"fmt"
	"net/http"
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

// queueBatch has A place one order of product p for each of n users, with
// the test holding p's stock lock: the first request leads and waits for
// the lock, the others queue behind it; then the lock is released. The
// leader's batch is itself alone; the n-1 others are the second batch. It
// returns the answers (an error where A died first).
func (d *drill) queueBatch(a *daemon, p string, n int) ([]reply, []error) {
	t := d.t
	t.Helper()
	release := d.holdLock("stock:" + p)
	replies, errs := make([]reply, n), make([]error, n)
	var wg sync.WaitGroup
	send := func(i int) {
		wg.Go(func() { replies[i], errs[i] = d.create(a, fmt.Sprintf("drill-%s-%d", p, i), "k", buy(p, 1)) })
	}
	send(0)
	d.waitSubscribed("stock:" + p)
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

// (i) An ordersd SIGKILLed in the middle of a batch, after the second
// batch's decrement and before its commit: the transaction rolls back
// whole, and every order of the batch, retried on another ordersd, is
// placed once.
func drillBatchKilled(t *testing.T, k *drillKit) {
	d := newDrill(t, k, map[string]int64{"i": 10})
	a := d.start("A", map[string]string{failpoint.EnvVar: string(failpoint.AfterDecrement) + "=kill@2"})
	replies, errs := d.queueBatch(a, "i", 6)
	a.waitKilled(t)
	// The leader's batch committed before the second one began (the second
	// waits for the lease it releases), but its answer races the kill: a
	// loaded machine may kill A before the 201 reaches the client. Then
	// its retry must replay that order.
	first := 1
	if errs[0] != nil {
		t.Logf("the leader's own batch committed, its answer lost to the kill (%v): retried below", errs[0])
		first = 0
	} else if replies[0].Status != http.StatusCreated {
		t.Fatalf("the leader's own batch: %v", replies[0])
	}
	for i := 1; i < 6; i++ {
		if errs[i] == nil {
			t.Fatalf("request %d of the killed batch was answered: %v", i, replies[i])
		}
	}
	if s := d.stock("i"); s != 9 {
		t.Fatalf("stock %d after the crash, want 9: the leader's batch stays, the killed batch's decrement must roll back", s)
	}
	b := d.start("B", map[string]string{"ORDERS_PROCESSING_LEASE": "5s"})
	var resps []audit.Response
	if first == 1 {
		resps = append(resps, response("drill-i-0", "k", replies[0]))
	}
	for i := first; i < 6; i++ {
		user := fmt.Sprintf("drill-i-%d", i)
		r := d.untilFinal("a retry of the killed batch", 40*time.Second, func() (reply, error) { return d.create(b, user, "k", buy("i", 1)) })
		if r.Status != http.StatusCreated {
			t.Fatalf("retry of %s: %v", user, r)
		}
		resps = append(resps, response(user, "k", r))
	}
	d.verdict(6, resps)
}

// (j) An ordersd SIGSTOPped in the middle of a batch, its transaction open
// with its rows locked, its lease running out: another ordersd's order of
// the same product waits on the rows, nothing is sold twice, and when the
// frozen one goes on, its batch commits or is refused whole, and every
// request gets its answer.
func drillBatchStopped(t *testing.T, k *drillKit) {
	d := newDrill(t, k, map[string]int64{"j": 5})
	a := d.start("A", map[string]string{failpoint.EnvVar: string(failpoint.AfterDecrement) + "=stop@2", "ORDERS_LOCK_TTL": "2s",
		"ORDERS_PROCESSING_LEASE": "40s"})
	done := make(chan struct{})
	var replies []reply
	var errs []error
	go func() { replies, errs = d.queueBatch(a, "j", 4); close(done) }()
	a.waitFailpoint(t, failpoint.AfterDecrement)
	a.waitStopped(t)
	b := d.start("B", map[string]string{"ORDERS_LOCK_WAIT": "10s", "ORDERS_PROCESSING_LEASE": "30s"})
	other := make(chan reply, 1)
	go func() {
		other <- d.untilFinal("B's order while A is frozen", 60*time.Second, func() (reply, error) { return d.create(b, "drill-j-b", "k", buy("j", 1)) })
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
		user := fmt.Sprintf("drill-j-%d", i)
		if r.Status != http.StatusCreated { // refused whole (a 503): its retry is placed now
			r = d.untilFinal("a retry of the frozen batch", 40*time.Second, func() (reply, error) { return d.create(b, user, "k", buy("j", 1)) })
		}
		if r.Status == http.StatusCreated {
			created++
		}
		resps = append(resps, response(user, "k", r))
	}
	if rb.Status == http.StatusCreated {
		created++
	}
	if created != 5 || d.stock("j") != 0 {
		t.Fatalf("%d orders created, stock %d; want 5 and 0", created, d.stock("j"))
	}
	d.verdict(5, resps)
}
