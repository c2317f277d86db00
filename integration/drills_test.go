package integration_test

// Failure drills, run end to end against real ordersd processes.
//
// The drills share one bed (five Redis masters behind proxies, and
// Postgres) and one ordersd binary built with -tags failpoints, so that
// QUORUMLOCK_FAILPOINTS can crash (kill) or freeze (stop) a process at an
// exact point of the flow (see internal/failpoint). Each drill has its own
// database, products, users and in-process fakepay, and starts ordersd as
// OS processes. Crashes are real SIGKILLs, checked through the process
// state; waits are for events (a failpoint line on stderr, a process exit
// or stop, an HTTP answer, a database state), each with a deadline. The
// verdict on stock and orders comes from audit.Orders.
//
//	drill                                                            test
//	(a) killed right after taking the stock lock: the TTL frees it   TestDrills/KillAfterLock
//	(b) the work outlives its lease: the late decrement is fenced    TestDrills/LeaseOutlived
//	(c) the unlock's reply is lost: the retry spares the next holder TestDrills/UnlockReplyLost
//	(d) Redis unreachable: fallback db and reject, no constraint
//	    bypassed                                                     TestDrills/RedisUnreachable
//	(e) 100 concurrent identical requests: exactly one order         TestDrills/HundredIdenticalRequests
//	(f) the same key with another quantity: always the conflict      TestDrills/ChangedQuantity
//	(g) killed after the commit, before SUCCESS: found by the unique
//	    key, Redis repaired, the same response replayed              TestDrills/KillAfterCommit
//	(h) the idempotency record deleted or expired: the unique key
//	    still returns the original order                             TestDrills/RecordExpired
//	(i) the seed's five crash points, each a real SIGKILL:           TestDrills/CrashPoints/...
//	    1. claimed IN_PROGRESS, before the lock                        .../after-claim
//	    2. stock decremented, before the order insert (same tx)        .../after-decrement
//	    3. committed, before SUCCESS (the client polls)                .../after-commit
//	    4. SUCCESS recorded, before the response                       .../after-success
//	    5. paid at the provider, the order still PAYING                .../after-charge
//	    and the payment's other two: the PENDING row written, before
//	    the charge (.../after-payment-begin); the result recorded,
//	    before the response (.../after-settle)
//	(j) a batch of several products SIGKILLed between its decrements
//	    and its commit: rolled back whole, each order placed once on
//	    retry                                                        TestDrills/BatchKilled
//	(k) a batch of several products SIGSTOPped with its rows locked,
//	    past its lease: another ordersd waits on the rows, nothing
//	    sold twice                                                   TestDrills/BatchStopped
//	(l) (j) with ORDERS_LOCK=auto: the quiet batch takes no lock     TestDrills/QuietBatchKilled
//
// Run them with
//
//	QUORUMLOCK_TESTBED=local go test -count=1 -run 'TestDrills' ./integration/
//
// or one of them with -run 'TestDrills/KillAfterLock'.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quorumlock/quorumlock/devtools/audit"
	"github.com/quorumlock/quorumlock/devtools/fakepay"
	"github.com/quorumlock/quorumlock/devtools/storetest"
	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/devtools/testbed/etcdbed"
	"github.com/quorumlock/quorumlock/internal/failpoint"
	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/orders/auth"
	"github.com/quorumlock/quorumlock/orders/idem"
	"github.com/quorumlock/quorumlock/orders/payment"
	"github.com/quorumlock/quorumlock/orders/request"
	"github.com/quorumlock/quorumlock/orders/store"
	"github.com/quorumlock/quorumlock/quorum"
)

// drillSecret signs the drills' bearer tokens.
const drillSecret = "drill-jwt-secret-0123456789abcdef"

// TestDrills runs the drills on one bed and one binary. UnlockReplyLost
// and RedisUnreachable fault every master of the shared bed, so they run
// first and alone; the others then run in parallel, each on its own
// database, products and users.
func TestDrills(t *testing.T) {
	runDrills(t, startKit(t, 0))
}

// runDrills runs every drill of TestDrills on k, as TestDrills says.
func runDrills(t *testing.T, k *drillKit) {
	t.Run("UnlockReplyLost", func(t *testing.T) { drillUnlockReplyLost(t, k) })
	t.Run("RedisUnreachable", func(t *testing.T) { drillRedisUnreachable(t, k) })
	parallel := []struct {
		name string
		run  func(*testing.T, *drillKit)
	}{
		{"KillAfterLock", drillKillAfterLock},
		{"LeaseOutlived", drillLeaseOutlived},
		{"HundredIdenticalRequests", drillHundredIdenticalRequests},
		{"ChangedQuantity", drillChangedQuantity},
		{"KillAfterCommit", drillKillAfterCommit},
		{"RecordExpired", drillRecordExpired},
		{"CrashPoints", drillCrashPoints},
		{"BatchKilled", drillBatchKilled},
		{"BatchStopped", drillBatchStopped},
		{"QuietBatchKilled", drillQuietBatchKilled},
	}
	for _, dr := range parallel {
		t.Run(dr.name, func(t *testing.T) {
			t.Parallel()
			dr.run(t, k)
		})
	}
}

// TestDrillsOnEtcd runs the drills of the order path with the stock lock
// on etcd (ORDERS_LOCK_BACKEND=etcd): a holder killed or frozen past its
// session's TTL, identical and changed requests, the crash points. The
// masters then hold only the idempotency records.
func TestDrillsOnEtcd(t *testing.T) {
	k := startKit(t, 3)
	for _, dr := range []struct {
		name string
		run  func(*testing.T, *drillKit)
	}{
		{"KillAfterLock", drillKillAfterLock},
		{"LeaseOutlived", drillLeaseOutlived},
		{"HundredIdenticalRequests", drillHundredIdenticalRequests},
		{"ChangedQuantity", drillChangedQuantity},
		{"CrashPoints", drillCrashPoints},
	} {
		t.Run(dr.name, func(t *testing.T) {
			t.Parallel()
			dr.run(t, k)
		})
	}
}

// drillKit is the drills' bed and their ordersd built with -tags
// failpoints, the settings that pick the lock's backend, and which
// Postgres holds the drills' databases.
type drillKit struct {
	bin     string
	bed     *testbed.Bed
	backend map[string]string
	// onHA puts each drill's database on the bed's Postgres HA group,
	// reached through its multi-host URI, instead of on bed.Postgres.
	onHA bool
}

// startKit builds the binary (once for the test binary: builds) while the
// bed starts (with an etcd cluster of etcd members for the lock when etcd
// is not 0); the bed goes away when t ends.
func startKit(t *testing.T, etcd int) *drillKit {
	t.Helper()
	start := time.Now()
	k := &drillKit{}
	built := make(chan error, 1)
	go func() {
		var err error
		k.bin, err = builds.path("github.com/quorumlock/quorumlock/cmd/ordersd")
		built <- err
	}()
	k.bed = bedtest.Start(t, testbed.Options{Redis: 5, Postgres: true, Etcd: etcd})
	if etcd > 0 {
		k.backend = map[string]string{"ORDERS_LOCK_BACKEND": "etcd", "ORDERS_ETCD_ENDPOINTS": strings.Join(k.bed.EtcdEndpoints(), ",")}
	}
	ctx := context.Background()
	for _, n := range k.bed.Redis {
		// Brand-new masters never held a lock: they may vote at once.
		c := n.Admin()
		err := quorum.TrustNode(ctx, c)
		_ = c.Close()
		if err != nil {
			t.Fatalf("trust %s: %v", n.Name(), err)
		}
	}
	if err := <-built; err != nil {
		t.Fatal(err)
	}
	t.Logf("drills: bed (%s) and ordersd -tags failpoints ready in %v", k.bed.Provider, time.Since(start).Round(time.Millisecond))
	return k
}

// drill is one drill's world: a fresh database with its products, a fake
// payment provider, and an HTTP client.
type drill struct {
	t       *testing.T
	bed     *testbed.Bed
	bin     string
	backend map[string]string
	dsn     string
	pool    *pgxpool.Pool
	st      *store.Store
	pay     *fakepay.Server
	payURL  string
	client  *http.Client
	initial map[string]int64
}

func newDrill(t *testing.T, k *drillKit, stock map[string]int64) *drill {
	t.Helper()
	var db storetest.Env
	if k.onHA {
		db = storetest.NewOnGroup(t, k.bed.PostgresHA)
	} else {
		db = storetest.New(t, k.bed.Postgres)
	}
	ctx := context.Background()
	for p, n := range stock {
		if err := db.Store.SeedProduct(ctx, p, n, 1999); err != nil {
			t.Fatal(err)
		}
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
	return &drill{t: t, bed: k.bed, bin: k.bin, backend: k.backend, dsn: db.DSN, pool: db.Pool, st: db.Store, pay: pay, payURL: paySrv.URL,
		client: &http.Client{Transport: tr, Timeout: 60 * time.Second}, initial: stock}
}

// daemon is one ordersd process.
type daemon struct {
	name string
	cmd  *exec.Cmd
	base string // http://host:port
	log  *lineLog
	done chan struct{} // closed once the process is reaped
}

// start runs ordersd serve on the drill's bed and database with the given
// settings over the drills' defaults, and waits until it listens.
func (d *drill) start(name string, settings map[string]string) *daemon {
	t := d.t
	t.Helper()
	env := map[string]string{
		"ORDERS_LISTEN":      "127.0.0.1:0",
		"ORDERS_LOG_FORMAT":  "json", // the drills read the log
		"ORDERS_REDIS_ADDRS": strings.Join(d.bed.RedisAddrs(), ","),
		// Four connections: two batches at once, one of each kind (a
		// batch drill's quiet orders wait behind the leader's).
		"ORDERS_DATABASE_URL": withParam(d.dsn, "pool_max_conns=4"),
		"ORDERS_JWT_SECRET":   drillSecret,
		"ORDERS_PAYMENT_URL":  d.payURL,
		"ORDERS_MIGRATE":      "false",
		"ORDERS_LOCK_TTL":     "3s",
		"ORDERS_LOCK_WAIT":    "3s",
		// The default (TTL/10, at most 250ms) is shorter than a master can
		// take beside the other packages' servers in CI, and an attempt
		// whose requests time out leaves its token where the SET ran: the
		// next attempts find the key held until it expires, a TTL that is
		// the whole lock wait. A drill with a shorter TTL sets less.
		"ORDERS_NODE_TIMEOUT":       "1s",
		"ORDERS_PROCESSING_LEASE":   "5s",
		"ORDERS_PAYMENT_TIMEOUT":    "2s",
		"ORDERS_RECONCILE_INTERVAL": "500ms",
		// The drills take the lock's path: every batch under a lease
		// (with auto, a quiet product's batch would take none).
		"ORDERS_LOCK": "on",
	}
	for k, v := range d.backend {
		env[k] = v
	}
	for k, v := range settings {
		env[k] = v
	}
	return spawn(t, "ordersd", name, exec.Command(d.bin, "serve"), env, "ORDERS_")
}

// withParam adds the query parameter kv to the URL dsn.
func withParam(dsn, kv string) string {
	if strings.Contains(dsn, "?") {
		return dsn + "&" + kv
	}
	return dsn + "?" + kv
}

// spawn starts cmd as the daemon kind/name with env over the test's own
// environment, minus the variables with the prefixes drop and the
// failpoints, and returns once its JSON log says "<kind> listening",
// with the address from that line. The process gets a process group of its
// own (a stopped process in a group that other exiting processes leave
// orphaned would be continued by the kernel) and dies with the test binary.
// It is killed at cleanup, and its log shown when the test failed.
func spawn(t *testing.T, kind, name string, cmd *exec.Cmd, env map[string]string, drop ...string) *daemon {
	t.Helper()
	for _, kv := range os.Environ() {
		keep := !strings.HasPrefix(kv, failpoint.EnvVar+"=")
		for _, pre := range drop {
			keep = keep && !strings.HasPrefix(kv, pre)
		}
		if keep {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s %s: %v", kind, name, err)
	}
	p := &daemon{name: name, cmd: cmd, log: newLineLog(), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.log.add(sc.Text())
		}
		_, _ = io.Copy(io.Discard, stderr) // after an overlong line: never block the process
		_ = cmd.Wait()                     // the exit is read from cmd.ProcessState
		p.log.end()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("%s %s (%s) stderr:\n%s", kind, name, env[failpoint.EnvVar], p.log.tail(40))
		}
	})
	line := p.waitLine(t, 60*time.Second, func(l string) bool { return strings.Contains(l, `"msg":"`+kind+` listening"`) })
	var listening struct {
		Addr string `json:"addr"`
	}
	if err := json.Unmarshal([]byte(line), &listening); err != nil || listening.Addr == "" {
		t.Fatalf("%s %s: listening line %q: %v", kind, name, line, err)
	}
	p.base = "http://" + listening.Addr
	return p
}

// kill ends the process with SIGKILL (a stopped one too) and reaps it.
func (p *daemon) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
	}
}

// waitLine waits up to d for a stderr line that match accepts.
func (p *daemon) waitLine(t *testing.T, d time.Duration, match func(string) bool) string {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		line, found, ended, changed := p.log.find(match)
		switch {
		case found:
			return line
		case ended:
			t.Fatalf("ordersd %s exited (%v) before the line expected; stderr:\n%s", p.name, p.cmd.ProcessState, p.log.tail(40))
		}
		select {
		case <-changed:
		case <-timer.C:
			t.Fatalf("ordersd %s: the line expected did not come within %v; stderr:\n%s", p.name, d, p.log.tail(40))
		}
	}
}

// waitFailpoint waits for the line the failpoint writes before it acts.
func (p *daemon) waitFailpoint(t *testing.T, n failpoint.Name) {
	t.Helper()
	want := "failpoint " + string(n) + " reached"
	p.waitLine(t, 30*time.Second, func(l string) bool { return l == want })
}

// waitKilled waits for the process to end and checks it died of SIGKILL.
func (p *daemon) waitKilled(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("ordersd %s still runs 30s after its failpoint", p.name)
	}
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("ordersd %s ended with %v, want death by SIGKILL", p.name, p.cmd.ProcessState)
	}
}

// waitStopped waits until the kernel reports the process stopped.
func (p *daemon) waitStopped(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, err := processState(p.cmd.Process.Pid)
		if err == nil && st == "T" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ordersd %s is not stopped: state %q %v", p.name, st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// processState is the state letter of process pid (R, S, T, ...).
func processState(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces and parentheses
	if i < 0 || i+3 > len(s) {
		return "", fmt.Errorf("unparsable /proc/%d/stat %q", pid, s)
	}
	return s[i+2 : i+3], nil
}

// metric reads one sample of the daemon's /metrics, 0 when absent.
func (p *daemon) metric(t *testing.T, d *drill, series string) float64 {
	t.Helper()
	resp, err := d.client.Get(p.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("metric %s: %q", series, line)
			}
			return f
		}
	}
	return 0
}

// lineLog keeps a process's stderr lines and tells waiters of new ones.
type lineLog struct {
	mu      sync.Mutex
	lines   []string
	ended   bool
	changed chan struct{} // closed and replaced at every change
}

func newLineLog() *lineLog { return &lineLog{changed: make(chan struct{})} }

func (l *lineLog) add(s string) {
	l.mu.Lock()
	l.lines = append(l.lines, s)
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
}

func (l *lineLog) end() {
	l.mu.Lock()
	l.ended = true
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
}

// find returns the first line match accepts, whether the stream ended, and
// a channel closed at the next change.
func (l *lineLog) find(match func(string) bool) (line string, found, ended bool, changed <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.lines {
		if match(s) {
			return s, true, l.ended, l.changed
		}
	}
	return "", false, l.ended, l.changed
}

func (l *lineLog) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	from := max(0, len(l.lines)-n)
	return strings.Join(l.lines[from:], "\n")
}

// reply is one HTTP answer.
type reply struct {
	Status int
	Header http.Header
	Body   string
}

func (r reply) String() string { return fmt.Sprintf("%d %s", r.Status, r.Body) }

// field returns a top-level string field of a JSON body ("" if none).
func (r reply) field(name string) string {
	var m map[string]any
	if json.Unmarshal([]byte(r.Body), &m) != nil {
		return ""
	}
	s, _ := m[name].(string)
	return s
}

func (r reply) replayed() bool { return r.Header.Get("Idempotent-Replayed") == "true" }

// buy is the body of an order of qty units of product.
func buy(product string, qty int) string {
	return fmt.Sprintf(`{"productId":%q,"quantity":%d,"addressVersion":"v1"}`, product, qty)
}

// do sends one request as user; a transport error (the process died) is
// returned as is.
func (d *drill) do(method, url, user, key, body string) (reply, error) {
	tok, err := auth.Mint([]byte(drillSecret), user, time.Hour)
	if err != nil {
		return reply{}, err
	}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{Status: resp.StatusCode, Header: resp.Header, Body: string(b)}, nil
}

// create is POST /orders.
func (d *drill) create(p *daemon, user, key, body string) (reply, error) {
	return d.do(http.MethodPost, p.base+"/orders", user, key, body)
}

// mustCreate is create that fails the test on a transport error.
func (d *drill) mustCreate(p *daemon, user, key, body string) reply {
	d.t.Helper()
	r, err := d.create(p, user, key, body)
	if err != nil {
		d.t.Fatalf("POST /orders to %s: %v", p.name, err)
	}
	return r
}

// untilFinal repeats send while the answer is not final (202 in progress,
// 503 retry, or no answer), within limit, as a client following
// Retry-After would.
func (d *drill) untilFinal(what string, limit time.Duration, send func() (reply, error)) reply {
	d.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		r, err := send()
		if err == nil && r.Status != http.StatusAccepted && r.Status != http.StatusServiceUnavailable {
			return r
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("%s: no final answer within %v: last %v %v", what, limit, r, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// response is the checker's record of an answer.
func response(user, key string, r reply) audit.Response {
	resp := audit.Response{UserID: user, IdempotencyKey: key, Status: r.Status, Body: r.Body}
	if r.Status == http.StatusCreated {
		resp.OrderID = r.field("orderId")
	}
	return resp
}

func (d *drill) stock(product string) int64 {
	d.t.Helper()
	s, err := d.st.Stock(context.Background(), product)
	if err != nil {
		d.t.Fatal(err)
	}
	return s.Available
}

// orders reads the orders table, a cart's lines (product_id NULL on its
// row) from order_lines.
func (d *drill) orders() []audit.OrderRow {
	d.t.Helper()
	ctx := context.Background()
	rows, err := d.pool.Query(ctx, `SELECT order_id, user_id, idempotency_key, coalesce(product_id, ''), quantity, status FROM orders ORDER BY created_at`)
	if err != nil {
		d.t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (audit.OrderRow, error) {
		var o audit.OrderRow
		return o, r.Scan(&o.OrderID, &o.UserID, &o.IdempotencyKey, &o.ProductID, &o.Quantity, &o.Status)
	})
	if err != nil {
		d.t.Fatal(err)
	}
	lines := map[string][]audit.Line{}
	rows, err = d.pool.Query(ctx, `SELECT l.order_id, l.product_id, l.quantity FROM order_lines l JOIN orders o USING (order_id) WHERE o.product_id IS NULL`)
	if err != nil {
		d.t.Fatal(err)
	}
	var id string
	var l audit.Line
	if _, err := pgx.ForEachRow(rows, []any{&id, &l.ProductID, &l.Quantity}, func() error { lines[id] = append(lines[id], l); return nil }); err != nil {
		d.t.Fatal(err)
	}
	for i := range out {
		out[i].Lines = lines[out[i].OrderID]
	}
	return out
}

// saved is the outcome Postgres keeps for (user, key); ok is false when
// there is none.
func (d *drill) saved(user, key string) (store.Outcome, bool) {
	d.t.Helper()
	out, err := d.st.Lookup(context.Background(), user, request.MustKey(key))
	if errors.Is(err, store.ErrNotFound) {
		return store.Outcome{}, false
	}
	if err != nil {
		d.t.Fatal(err)
	}
	return out, true
}

// verdict runs the checker on the drill's products, orders and answers,
// and checks the number of orders.
func (d *drill) verdict(wantOrders int, responses []audit.Response) {
	d.t.Helper()
	stock := map[string]audit.Stock{}
	for p, n := range d.initial {
		stock[p] = audit.Stock{Initial: n, Final: d.stock(p)}
	}
	rows := d.orders()
	v := audit.Orders(stock, rows, responses)
	if !v.OK() {
		d.t.Fatalf("checker: %v", v)
	}
	if len(rows) != wantOrders {
		d.t.Fatalf("%d orders, want %d: %+v", len(rows), wantOrders, rows)
	}
	d.t.Logf("checker: %v; stock %v", v, stock)
}

// claims is an idempotency store on the bed's masters, in the order
// ordersd has them, to read and drop records as the drills need.
func (d *drill) claims() *idem.Store {
	d.t.Helper()
	cs := bedtest.RedisClients(d.t, d.bed)
	nodes := make([]redis.UniversalClient, len(cs))
	for i, c := range cs {
		nodes[i] = c
	}
	s, err := idem.New(nodes)
	if err != nil {
		d.t.Fatal(err)
	}
	return s
}

// record reads the idempotency record of (user, key).
func (d *drill) record(claims *idem.Store, user, key string) (idem.Record, error) {
	d.t.Helper()
	k, err := idem.NewKey(user, request.MustKey(key))
	if err != nil {
		d.t.Fatal(err)
	}
	return claims.Get(context.Background(), k)
}

// dropRecord deletes the idempotency record of (user, key) on its node.
func (d *drill) dropRecord(claims *idem.Store, user, key string) {
	d.t.Helper()
	k, err := idem.NewKey(user, request.MustKey(key))
	if err != nil {
		d.t.Fatal(err)
	}
	c := d.bed.Redis[claims.NodeIndex(k)].Admin()
	defer c.Close()
	if n, err := c.Del(context.Background(), k.String()).Result(); err != nil || n != 1 {
		d.t.Fatalf("delete the record of %s/%s: %d %v", user, key, n, err)
	}
}

// lockHeld counts the lock's servers that hold key, and how many make it
// held: the masters (a majority) for the Redis lock; for etcd, the
// recipe's keys under the key's prefix (owner and waiters: one suffices).
func (d *drill) lockHeld(key string) (held, enough int) {
	d.t.Helper()
	if d.backend == nil {
		held, _ := d.lockHolders(key)
		return held, len(d.bed.Redis)/2 + 1
	}
	cli, err := etcdbed.Client(d.bed)
	if err != nil {
		d.t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "quorumlock/"+key+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		d.t.Fatalf("read %s on etcd: %v", key, err)
	}
	return int(resp.Count), 1
}

// lockHolders counts the masters that hold key, read directly.
func (d *drill) lockHolders(key string) (held int, values []string) {
	d.t.Helper()
	for _, n := range d.bed.Redis {
		c := n.Admin()
		v, err := c.Get(context.Background(), key).Result()
		_ = c.Close()
		switch {
		case errors.Is(err, redis.Nil):
			values = append(values, "")
		case err != nil:
			d.t.Fatalf("read %s on %s: %v", key, n.Name(), err)
		default:
			held++
			values = append(values, v)
		}
	}
	return held, values
}

// armed is the QUORUMLOCK_FAILPOINTS setting that arms point with action.
func armed(point failpoint.Name, action failpoint.Action) map[string]string {
	return map[string]string{failpoint.EnvVar: string(point) + "=" + string(action)}
}

// with adds settings to a copy of base.
func with(base map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range base {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// (a) The holder dies right after it took the stock lock: its keys stay on
// the masters until their TTL, then the next request, to another ordersd,
// takes the lock and sells. The crashed request's own retry goes through
// once its processing lease is over.
func drillKillAfterLock(t *testing.T, k *drillKit) {
	d := newDrill(t, k, map[string]int64{"a": 5})
	a := d.start("A", with(armed(failpoint.AfterLock, failpoint.Kill), "ORDERS_LOCK_TTL", "6s"))
	if r, err := d.create(a, "drill-a-1", "k1", buy("a", 1)); err == nil {
		t.Fatalf("A answered %v through its failpoint", r)
	}
	a.waitFailpoint(t, failpoint.AfterLock)
	a.waitKilled(t)
	killed := time.Now()
	// The crash left the lock behind: no unlock ran.
	if held, enough := d.lockHeld("stock:a"); held < enough {
		t.Fatalf("after the crash %d of the lock's servers hold stock:a, want %d", held, enough)
	}
	// B waits for the lock longer than A's TTL.
	b := d.start("B", map[string]string{"ORDERS_LOCK_WAIT": "10s", "ORDERS_PROCESSING_LEASE": "12s"})
	r := d.mustCreate(b, "drill-a-2", "k2", buy("a", 1))
	if r.Status != http.StatusCreated {
		t.Fatalf("the next request after the crash: %v", r)
	}
	t.Logf("the next holder sold %v after the crash", time.Since(killed).Round(time.Millisecond))
	// B's unlock returns at a majority; the other masters follow.
	deadline := time.Now().Add(10 * time.Second)
	for held, _ := d.lockHeld("stock:a"); held != 0; held, _ = d.lockHeld("stock:a") {
		if time.Now().After(deadline) {
			t.Fatalf("%d of the lock's servers still hold stock:a after B unlocked", held)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The crashed request, retried with its key: 202 while A's processing
	// lease runs, then Postgres shows no order and it proceeds.
	again := d.untilFinal("retry of the crashed request", 30*time.Second, func() (reply, error) {
		return d.create(b, "drill-a-1", "k1", buy("a", 1))
	})
	if again.Status != http.StatusCreated || again.replayed() {
		t.Fatalf("retry of the crashed request: %v (replayed %v)", again, again.replayed())
	}
	d.verdict(2, []audit.Response{response("drill-a-2", "k2", r), response("drill-a-1", "k1", again)})
}

// (b) The work outlives its lease: A freezes (SIGSTOP) right after taking
// the lock, for longer than its 2s TTL. B takes the lock meanwhile and
// sells the last unit. Continued, A's fenced decrement carries the older
// fence and is refused; A takes a new lease, finds no stock and answers
// 409 out of stock.
func drillLeaseOutlived(t *testing.T, k *drillKit) {
	d := newDrill(t, k, map[string]int64{"b": 1})
	// A's processing lease (budget 4/5 of it) outlasts the freeze, so the
	// decrement, not the request's deadline, is what the fence judges.
	a := d.start("A", with(armed(failpoint.AfterLock, failpoint.Stop),
		"ORDERS_LOCK_TTL", "2s", "ORDERS_NODE_TIMEOUT", "500ms", "ORDERS_LOCK_WAIT", "2s", "ORDERS_PROCESSING_LEASE", "40s"))
	b := d.start("B", map[string]string{"ORDERS_LOCK_WAIT": "10s", "ORDERS_PROCESSING_LEASE": "12s"})
	type result struct {
		r   reply
		err error
	}
	first := make(chan result, 1)
	go func() {
		r, err := d.create(a, "drill-b-1", "k", buy("b", 1))
		first <- result{r, err}
	}()
	a.waitFailpoint(t, failpoint.AfterLock)
	a.waitStopped(t)
	stopped := time.Now()
	second := d.mustCreate(b, "drill-b-2", "k", buy("b", 1))
	if second.Status != http.StatusCreated {
		t.Fatalf("B while A is frozen: %v", second)
	}
	t.Logf("B sold the unit %v into A's freeze", time.Since(stopped).Round(time.Millisecond))
	select {
	case res := <-first:
		t.Fatalf("A answered while stopped: %v %v", res.r, res.err)
	default:
	}
	if st, err := processState(a.cmd.Process.Pid); err != nil || st != "T" {
		t.Fatalf("A is no longer stopped: %q %v", st, err)
	}
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var res result
	select {
	case res = <-first:
	case <-time.After(40 * time.Second):
		st, err := processState(a.cmd.Process.Pid)
		t.Fatalf("A did not answer within 40s of SIGCONT (process state %q %v)", st, err)
	}
	if res.err != nil {
		t.Fatalf("A after SIGCONT: %v", res.err)
	}
	if res.r.Status != http.StatusConflict || res.r.field("code") != "out_of_stock" {
		t.Fatalf("A after SIGCONT: %v, want 409 out_of_stock", res.r)
	}
	if n := a.metric(t, d, `orders_place_total{outcome="stale_fence"}`); n != 1 {
		t.Fatalf("A's stale fence rejections: %v, want 1", n)
	}
	if out, ok := d.saved("drill-b-1", "k"); !ok || out.Kind != store.OutcomeOutOfStock || string(out.ResponseBody) != res.r.Body {
		t.Fatalf("saved answer of A's request: %+v %v", out, ok)
	}
	if s := d.stock("b"); s != 0 {
		t.Fatalf("stock %d, want 0", s)
	}
	d.verdict(1, []audit.Response{response("drill-b-2", "k", second), response("drill-b-1", "k", res.r)})
	if rows := d.orders(); rows[0].UserID != "drill-b-2" {
		t.Fatalf("the order is %+v, want B's", rows[0])
	}
}

// (c) The unlock's reply is lost: every master runs A's release but its
// answer arrives after the node timeout, so Unlock reports it
// unconfirmed. B then takes the key. A retries Unlock with the same token,
// as it may: the compare-and-delete finds B's token and leaves it on
// every master.
func drillUnlockReplyLost(t *testing.T, k *drillKit) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	newLocker := func() (*quorum.Locker, []*redis.Client) {
		cs := bedtest.RedisClients(t, k.bed)
		nodes := make([]redis.UniversalClient, len(cs))
		for i, c := range cs {
			nodes[i] = c
		}
		l, err := quorum.New(nodes, quorum.WithTTL(30*time.Second), quorum.WithNodeTimeout(500*time.Millisecond),
			quorum.WithMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l, cs
	}
	a, clientsA := newLocker()
	b, _ := newLocker()
	d := &drill{t: t, bed: k.bed}
	// quiet waits until no request of A is out on any master, so the
	// release below goes out on open connections: a request that is still
	// out when the replies slow down times out, its connection is closed,
	// and a new one would wait for its handshake reply, not send the
	// release.
	quiet := func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			busy := 0
			for _, c := range clientsA {
				st := c.PoolStats()
				busy += int(st.TotalConns - st.IdleConns)
			}
			if busy == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of A's requests still out after 10s", busy)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// Warm up: open the lockers' connections and load the release script
	// on every master, so that the release below is one round trip (a
	// first EVALSHA would wait for NOSCRIPT before sending the script).
	for _, l := range []*quorum.Locker{a, b} {
		lease, err := l.Lock(ctx, "drill-c:warm")
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for held, _ := d.lockHolders("drill-c:warm"); held != 0; held, _ = d.lockHolders("drill-c:warm") {
			if time.Now().After(deadline) {
				t.Fatalf("the warm-up key is still on %d masters", held)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	const key = "drill-c:unlock"
	leaseA, err := a.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	quiet()
	// Replies 10s late: far past the 500ms node timeout, and far past the
	// retry below, so the first try's replies cannot arrive before it and
	// confirm A's release after the fact, however loaded the machine.
	for _, n := range k.bed.Redis {
		if err := n.AddLatency(ctx, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, n := range k.bed.Redis {
			_ = n.AddLatency(context.Background(), 0)
		}
	})
	err = leaseA.Unlock(ctx)
	if !errors.Is(err, lease.ErrUnlockUnconfirmed) {
		t.Fatalf("A's unlock with every reply late: %v, want ErrUnlockUnconfirmed", err)
	}
	// Unlock returns at its deadline; a release request may end a little
	// after it. Take the latency away only once every one has ended, or
	// the delayed replies, let through at once, could still reach a
	// request and confirm A's release after the fact.
	quiet()
	for _, n := range k.bed.Redis {
		if err := n.AddLatency(ctx, 0); err != nil {
			t.Fatal(err)
		}
	}
	// The releases ran, long before the 30s TTL: the replies, not the
	// requests, were lost.
	deadline := time.Now().Add(5 * time.Second)
	for held, _ := d.lockHolders(key); held != 0; held, _ = d.lockHolders(key) {
		if time.Now().After(deadline) {
			t.Fatalf("%d masters still hold A's key: the releases did not run", held)
		}
		time.Sleep(20 * time.Millisecond)
	}
	leaseB, err := b.Lock(ctx, key)
	if err != nil {
		t.Fatalf("B: %v", err)
	}
	allB := func() bool {
		_, values := d.lockHolders(key)
		for _, v := range values {
			if v != leaseB.Token() {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(10 * time.Second); !allB(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			_, values := d.lockHolders(key)
			t.Fatalf("B's token is not on every master: %q", values)
		}
	}
	// A retries its unlock with the same token.
	if err := leaseA.Unlock(ctx); !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("A's retried unlock: %v, want ErrLeaseLost (the token is gone)", err)
	}
	if !allB() {
		_, values := d.lockHolders(key)
		t.Fatalf("A's retried unlock touched B's key: %q, want %s everywhere", values, leaseB.Token())
	}
	// An unconfirmed extension (no majority answered in time: a loaded
	// machine) is retried, as Do's watchdog does; a lost lease is not.
	err = leaseB.Extend(ctx, 30*time.Second)
	for try := 1; try < 3 && errors.Is(err, lease.ErrExtendUnconfirmed); try++ {
		err = leaseB.Extend(ctx, 30*time.Second)
	}
	if err != nil {
		t.Fatalf("B can no longer extend its lease: %v", err)
	}
	if err := leaseB.Unlock(ctx); err != nil {
		t.Fatalf("B's unlock: %v", err)
	}
}

// (d) Redis unreachable: every master is partitioned (connections hang).
// With ORDERS_LOCK_FALLBACK=db, Postgres arbitrates alone: 8 users race
// for 3 units and exactly 3 orders are placed, one per key, stock 0; with
// reject, every request gets 503 with Retry-After and nothing is written,
// and after the heal the same key goes through.
func drillRedisUnreachable(t *testing.T, k *drillKit) {
	d := newDrill(t, k, map[string]int64{"d-db": 3, "d-rej": 3})
	quick := map[string]string{"ORDERS_LOCK_WAIT": "1s", "ORDERS_NODE_TIMEOUT": "300ms", "ORDERS_PROCESSING_LEASE": "5s"}
	db := d.start("db", with(quick, "ORDERS_LOCK_FALLBACK", "db"))
	rej := d.start("reject", with(quick, "ORDERS_LOCK_FALLBACK", "reject"))
	ctx := context.Background()
	for _, n := range d.bed.Redis {
		if err := n.Partition(ctx); err != nil {
			t.Fatal(err)
		}
	}
	healed := false
	heal := func() {
		if healed {
			return
		}
		healed = true
		for _, n := range d.bed.Redis {
			if err := n.Heal(ctx); err != nil {
				t.Errorf("heal %s: %v", n.Name(), err)
			}
		}
	}
	t.Cleanup(heal)

	type sent struct {
		user string
		r    reply
		err  error
	}
	var wg sync.WaitGroup
	rejected := make([]sent, 3)
	for i := range rejected {
		wg.Add(1)
		go func() {
			defer wg.Done()
			user := fmt.Sprintf("drill-d-rej-%d", i)
			r, err := d.create(rej, user, "k", buy("d-rej", 1))
			rejected[i] = sent{user, r, err}
		}()
	}
	// Eight users for three units; two of them send their request twice
	// at once. Each is retried by its client until the answer is final.
	placed := make([]sent, 10)
	for i := range placed {
		wg.Add(1)
		go func() {
			defer wg.Done()
			user := fmt.Sprintf("drill-d-db-%d", i%8)
			deadline := time.Now().Add(60 * time.Second)
			for {
				r, err := d.create(db, user, "k", buy("d-db", 1))
				if (err == nil && r.Status != http.StatusAccepted && r.Status != http.StatusServiceUnavailable) || time.Now().After(deadline) {
					placed[i] = sent{user, r, err}
					return
				}
				time.Sleep(200 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	for _, s := range rejected {
		if s.err != nil || s.r.Status != http.StatusServiceUnavailable || s.r.Header.Get("Retry-After") == "" {
			t.Fatalf("reject mode, %s: %v %v, want 503 with Retry-After", s.user, s.r, s.err)
		}
	}
	var resps []audit.Response
	codes := map[int]int{}
	for _, s := range placed {
		if s.err != nil {
			t.Fatalf("db mode, %s: %v", s.user, s.err)
		}
		codes[s.r.Status]++
		if s.r.Status != http.StatusCreated && (s.r.Status != http.StatusConflict || s.r.field("code") != "out_of_stock") {
			t.Fatalf("db mode, %s: %v, want 201 or 409 out_of_stock", s.user, s.r)
		}
		resps = append(resps, response(s.user, "k", s.r))
	}
	t.Logf("db fallback: answers %v", codes)
	if n := db.metric(t, d, `orders_lock_fallback_total{mode="db"}`); n < 1 {
		t.Fatalf("the db instance never fell back (%v)", n)
	}
	if n := rej.metric(t, d, `orders_lock_fallback_total{mode="reject"}`); n < 3 {
		t.Fatalf("the reject instance fell back %v times, want 3", n)
	}
	if s := d.stock("d-rej"); s != 3 {
		t.Fatalf("stock of d-rej %d after the rejections", s)
	}
	d.verdict(3, resps)
	for _, o := range d.orders() {
		if o.ProductID != "d-db" {
			t.Fatalf("an order of %s while it was rejecting: %+v", o.ProductID, o)
		}
	}
	// Nothing was saved for a 503: after the heal the same key sells.
	heal()
	after := d.untilFinal("reject mode after the heal", 30*time.Second, func() (reply, error) {
		return d.create(rej, "drill-d-rej-0", "k", buy("d-rej", 1))
	})
	if after.Status != http.StatusCreated {
		t.Fatalf("reject mode after the heal: %v", after)
	}
	d.verdict(4, append(resps, response("drill-d-rej-0", "k", after)))
}

// (e) 100 concurrent identical requests, spread over two ordersd: one
// order, and every final answer the same.
func drillHundredIdenticalRequests(t *testing.T, k *drillKit) {
	d := newDrill(t, k, map[string]int64{"e": 5})
	ins := []*daemon{d.start("X", nil), d.start("Y", nil)}
	const user, key = "drill-e", "k"
	answers := make([]reply, 100)
	errs := make([]error, 100)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i], errs[i] = d.create(ins[i%2], user, key, buy("e", 1))
		}()
	}
	wg.Wait()
	var resps []audit.Response
	for i, r := range answers {
		switch {
		case errs[i] != nil:
			t.Fatalf("request %d: %v", i, errs[i])
		case r.Status != http.StatusCreated && r.Status != http.StatusAccepted && r.Status != http.StatusServiceUnavailable:
			t.Fatalf("request %d: %v", i, r)
		}
		resps = append(resps, response(user, key, r))
	}
	t.Logf("first answers: %s", audit.Summary(resps))
	// A 202 polls its Location, a 503 sends the request again, until the
	// final answer, which must be the same for all.
	for i, r := range answers {
		if r.Status == http.StatusCreated {
			continue
		}
		p, loc := ins[i%2], r.Header.Get("Location")
		final := d.untilFinal("request "+strconv.Itoa(i), 30*time.Second, func() (reply, error) {
			if loc != "" {
				return d.do(http.MethodGet, p.base+loc, user, "", "")
			}
			return d.create(p, user, key, buy("e", 1))
		})
		if final.Status != http.StatusCreated {
			t.Fatalf("request %d: final answer %v", i, final)
		}
		resps = append(resps, response(user, key, final))
	}
	d.verdict(1, resps)
}

// (f) The same key with another quantity: every request, on either
// ordersd, concurrent or not, with the Redis record or without it, gets
// the conflict; the original request still gets its order.
func drillChangedQuantity(t *testing.T, k *drillKit) {
	d := newDrill(t, k, map[string]int64{"f": 10})
	ins := []*daemon{d.start("X", nil), d.start("Y", nil)}
	const user, key = "drill-f", "k"
	first := d.mustCreate(ins[0], user, key, buy("f", 1))
	if first.Status != http.StatusCreated {
		t.Fatalf("first request: %v", first)
	}
	conflict := func(what string, r reply, err error) {
		t.Helper()
		if err != nil || r.Status != http.StatusConflict || r.field("code") != "fingerprint_mismatch" {
			t.Fatalf("%s: %v %v, want 409 fingerprint_mismatch", what, r, err)
		}
	}
	var wg sync.WaitGroup
	answers := make([]reply, 20)
	errs := make([]error, 20)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i], errs[i] = d.create(ins[i%2], user, key, buy("f", 2))
		}()
	}
	wg.Wait()
	for i := range answers {
		conflict(fmt.Sprintf("changed quantity #%d", i), answers[i], errs[i])
	}
	// Without the Redis record, Postgres says the same.
	d.dropRecord(d.claims(), user, key)
	r, err := d.create(ins[1], user, key, buy("f", 2))
	conflict("changed quantity, no Redis record", r, err)
	same := d.mustCreate(ins[1], user, key, buy("f", 1))
	if same.Status != first.Status || same.Body != first.Body || !same.replayed() {
		t.Fatalf("the original request again: %v, want a replay of %v", same, first)
	}
	// The conflicts are not the key's saved answer: the checker judges the
	// order and its answers.
	d.verdict(1, []audit.Response{response(user, key, first), response(user, key, same)})
}

// (g) A dies after its order committed and before the Redis record became
// SUCCESS. The client's retry, to a fresh ordersd, waits out A's processing
// lease (202), then finds the order through UNIQUE(user, key), repairs the
// Redis record and replays the response A would have sent: same order id,
// same body.
func drillKillAfterCommit(t *testing.T, k *drillKit) {
	d := newDrill(t, k, map[string]int64{"g": 5})
	a := d.start("A", armed(failpoint.AfterCommit, failpoint.Kill))
	const user, key = "drill-g", "k"
	if r, err := d.create(a, user, key, buy("g", 1)); err == nil {
		t.Fatalf("A answered %v through its failpoint", r)
	}
	a.waitFailpoint(t, failpoint.AfterCommit)
	a.waitKilled(t)
	saved, ok := d.saved(user, key)
	if !ok || saved.Kind != store.OutcomeOrder {
		t.Fatalf("the order did not commit before the crash: %+v", saved)
	}
	claims := d.claims()
	if rec, err := d.record(claims, user, key); err != nil || rec.State != idem.StateInProgress {
		t.Fatalf("record after the crash: %+v %v, want IN_PROGRESS", rec, err)
	}
	b := d.start("B", nil)
	r := d.untilFinal("retry after the crash", 30*time.Second, func() (reply, error) { return d.create(b, user, key, buy("g", 1)) })
	if r.Status != saved.ResponseStatus || r.Body != string(saved.ResponseBody) || !r.replayed() || r.field("orderId") != saved.Order.ID {
		t.Fatalf("retry: %v (replayed %v), want a replay of %d %s", r, r.replayed(), saved.ResponseStatus, saved.ResponseBody)
	}
	rec, err := d.record(claims, user, key)
	if err != nil || rec.State != idem.StateSuccess || rec.Response == nil || string(rec.Response.Body) != r.Body {
		t.Fatalf("record not repaired: %+v %v", rec, err)
	}
	if n := b.metric(t, d, "orders_idempotency_repairs_total"); n != 1 {
		t.Fatalf("B repaired %v records, want 1", n)
	}
	again := d.mustCreate(b, user, key, buy("g", 1))
	if again.Status != r.Status || again.Body != r.Body {
		t.Fatalf("replay from the repaired record: %v, want %v", again, r)
	}
	d.verdict(1, []audit.Response{response(user, key, r), response(user, key, again)})
}

// (h) The idempotency record is gone, deleted (an eviction, a lost node)
// or expired (a short ORDERS_IDEMPOTENCY_TTL ran out): the same request is
// answered by UNIQUE(user, key) in Postgres with the original order, and
// no unit is taken twice.
func drillRecordExpired(t *testing.T, k *drillKit) {
	d := newDrill(t, k, map[string]int64{"h": 5})
	a := d.start("A", map[string]string{"ORDERS_IDEMPOTENCY_TTL": "6s", "ORDERS_PROCESSING_LEASE": "4s", "ORDERS_LOCK_WAIT": "2s"})
	const user = "drill-h"
	deleted := d.mustCreate(a, user, "k-deleted", buy("h", 1))
	expired := d.mustCreate(a, user, "k-expired", buy("h", 1))
	if deleted.Status != http.StatusCreated || expired.Status != http.StatusCreated {
		t.Fatalf("first answers: %v, %v", deleted, expired)
	}
	claims := d.claims()
	d.dropRecord(claims, user, "k-deleted")
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := d.record(claims, user, "k-expired")
		if errors.Is(err, idem.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the record did not expire: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var resps []audit.Response
	for key, first := range map[string]reply{"k-deleted": deleted, "k-expired": expired} {
		r := d.mustCreate(a, user, key, buy("h", 1))
		if r.Status != http.StatusCreated || r.Body != first.Body || !r.replayed() {
			t.Fatalf("%s without its record: %v, want a replay of %v", key, r, first)
		}
		resps = append(resps, response(user, key, first), response(user, key, r))
	}
	d.verdict(2, resps)
}

// (i) The crash points of the seed, each a real SIGKILL at the failpoint,
// and the recovery a fresh ordersd makes. The payment ones end with the
// reconciler settling the order, charged exactly once.
func drillCrashPoints(t *testing.T, k *drillKit) {
	t.Run("after-claim", func(t *testing.T) {
		t.Parallel()
		// The claim is IN_PROGRESS and nothing else happened: inside A's
		// processing lease a retry gets 202 with Retry-After and Location;
		// after it, Postgres has no outcome and the retry proceeds.
		d, user, key := newDrill(t, k, map[string]int64{"i1": 5}), "drill-i1", "k"
		crashAt(t, d, failpoint.AfterClaim, user, key, "i1", map[string]string{"ORDERS_PROCESSING_LEASE": "10s"})
		if _, ok := d.saved(user, key); ok || d.stock("i1") != 5 {
			t.Fatalf("the crash before the lock left an outcome or took stock (%d)", d.stock("i1"))
		}
		claims := d.claims()
		rec, err := d.record(claims, user, key)
		if err != nil || rec.State != idem.StateInProgress {
			t.Fatalf("record after the crash: %+v %v", rec, err)
		}
		b := d.start("B", nil)
		if rec, err := d.record(claims, user, key); err == nil && rec.LeaseLeft > 3*time.Second {
			r := d.mustCreate(b, user, key, buy("i1", 1))
			if r.Status != http.StatusAccepted || r.Header.Get("Retry-After") == "" || r.Header.Get("Location") != "/orders/requests?key="+key {
				t.Fatalf("inside A's processing lease: %v %v", r, r.Header)
			}
		}
		r := d.untilFinal("retry", 30*time.Second, func() (reply, error) { return d.create(b, user, key, buy("i1", 1)) })
		if r.Status != http.StatusCreated || r.replayed() {
			t.Fatalf("retry after the lease: %v (replayed %v), want a new order", r, r.replayed())
		}
		d.verdict(1, []audit.Response{response(user, key, r)})
	})
	t.Run("after-decrement", func(t *testing.T) {
		t.Parallel()
		// Killed inside the transaction, between the decrement and the
		// insert: Postgres rolls the decrement back with the rest.
		d, user, key := newDrill(t, k, map[string]int64{"i2": 5}), "drill-i2", "k"
		crashAt(t, d, failpoint.AfterDecrement, user, key, "i2", nil)
		if _, ok := d.saved(user, key); ok {
			t.Fatal("an outcome was saved by a transaction killed before its insert")
		}
		if s := d.stock("i2"); s != 5 {
			t.Fatalf("stock %d after the killed transaction, want 5", s)
		}
		b := d.start("B", nil)
		r := d.untilFinal("retry", 30*time.Second, func() (reply, error) { return d.create(b, user, key, buy("i2", 1)) })
		if r.Status != http.StatusCreated || r.replayed() {
			t.Fatalf("retry: %v (replayed %v), want a new order", r, r.replayed())
		}
		d.verdict(1, []audit.Response{response(user, key, r)})
	})
	t.Run("after-commit", func(t *testing.T) {
		t.Parallel()
		// Committed, not recorded SUCCESS; the client polls the request's
		// Location instead of sending the POST again (drill (g) sends it):
		// the poll finds the order in Postgres and repairs Redis.
		d, user, key := newDrill(t, k, map[string]int64{"i3": 5}), "drill-i3", "k"
		crashAt(t, d, failpoint.AfterCommit, user, key, "i3", nil)
		saved, ok := d.saved(user, key)
		if !ok {
			t.Fatal("no order after the commit")
		}
		b := d.start("B", nil)
		r, err := d.do(http.MethodGet, b.base+"/orders/requests?key="+key, user, "", "")
		if err != nil || r.Status != http.StatusCreated || r.Body != string(saved.ResponseBody) || !r.replayed() {
			t.Fatalf("poll: %v %v, want the saved %s", r, err, saved.ResponseBody)
		}
		if rec, err := d.record(d.claims(), user, key); err != nil || rec.State != idem.StateSuccess || string(rec.Response.Body) != r.Body {
			t.Fatalf("record not repaired by the poll: %+v %v", rec, err)
		}
		again := d.mustCreate(b, user, key, buy("i3", 1))
		if again.Body != r.Body || !again.replayed() {
			t.Fatalf("POST after the poll: %v", again)
		}
		d.verdict(1, []audit.Response{response(user, key, r), response(user, key, again)})
	})
	t.Run("after-success", func(t *testing.T) {
		t.Parallel()
		// SUCCESS is in Redis, the response never left: the retry is
		// replayed from Redis at once, the same status and body.
		d, user, key := newDrill(t, k, map[string]int64{"i4": 5}), "drill-i4", "k"
		crashAt(t, d, failpoint.AfterSuccess, user, key, "i4", nil)
		saved, ok := d.saved(user, key)
		if !ok {
			t.Fatal("no order")
		}
		if rec, err := d.record(d.claims(), user, key); err != nil || rec.State != idem.StateSuccess {
			t.Fatalf("record after the crash: %+v %v, want SUCCESS", rec, err)
		}
		b := d.start("B", nil)
		r := d.mustCreate(b, user, key, buy("i4", 1))
		if r.Status != saved.ResponseStatus || r.Body != string(saved.ResponseBody) || !r.replayed() {
			t.Fatalf("retry: %v, want a replay of %s", r, saved.ResponseBody)
		}
		d.verdict(1, []audit.Response{response(user, key, r)})
	})
	// The payment flow: A dies during POST /orders/{id}/pay; B's
	// reconciler settles the order; the provider moved money once.
	for _, point := range []failpoint.Name{failpoint.AfterPaymentBegin, failpoint.AfterCharge, failpoint.AfterSettle} {
		t.Run(string(point), func(t *testing.T) {
			t.Parallel()
			payCrash(t, k, point)
		})
	}
}

// crashAt starts ordersd A with point armed to kill, sends one order that
// dies there, and checks the death. It returns A, dead.
func crashAt(t *testing.T, d *drill, point failpoint.Name, user, key, product string, settings map[string]string) *daemon {
	t.Helper()
	a := d.start("A", with(settings, failpoint.EnvVar, string(point)+"="+string(failpoint.Kill)))
	if r, err := d.create(a, user, key, buy(product, 1)); err == nil {
		t.Fatalf("A answered %v through its failpoint %s", r, point)
	}
	a.waitFailpoint(t, point)
	a.waitKilled(t)
	return a
}

// payCrash kills A at a payment failpoint and lets B's reconciler settle.
func payCrash(t *testing.T, k *drillKit, point failpoint.Name) {
	product := "i-" + string(point)
	d, user := newDrill(t, k, map[string]int64{product: 5}), "drill-"+string(point)
	a := d.start("A", armed(point, failpoint.Kill))
	created := d.mustCreate(a, user, "k", buy(product, 1))
	if created.Status != http.StatusCreated {
		t.Fatalf("order: %v", created)
	}
	id := created.field("orderId")
	rid := payment.RequestID(id)
	if r, err := d.do(http.MethodPost, a.base+"/orders/"+id+"/pay", user, "", ""); err == nil {
		t.Fatalf("A answered the payment %v through its failpoint", r)
	}
	a.waitFailpoint(t, point)
	a.waitKilled(t)

	ctx := context.Background()
	o, err := d.st.GetOrder(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.st.GetPayment(ctx, rid)
	if err != nil {
		t.Fatal(err)
	}
	_, charged := d.pay.Lookup(rid)
	sentBefore := d.pay.Stats().ByKey[rid].Received
	switch point {
	case failpoint.AfterPaymentBegin: // the charge was never sent
		if o.Status != store.StatusPaying || p.Status != store.PaymentPending || !errors.Is(charged, fakepay.ErrNotFound) {
			t.Fatalf("after the crash: order %s, payment %s, provider %v", o.Status, p.Status, charged)
		}
	case failpoint.AfterCharge: // money moved, the order does not know
		if o.Status != store.StatusPaying || p.Status != store.PaymentPending || charged != nil {
			t.Fatalf("after the crash: order %s, payment %s, provider %v", o.Status, p.Status, charged)
		}
	case failpoint.AfterSettle: // recorded, the reply was lost
		if o.Status != store.StatusPaid || p.Status != store.PaymentSucceeded || charged != nil {
			t.Fatalf("after the crash: order %s, payment %s, provider %v", o.Status, p.Status, charged)
		}
	}

	b := d.start("B", map[string]string{"ORDERS_RECONCILE_INTERVAL": "500ms", "ORDERS_PAYMENT_TIMEOUT": "2s"})
	deadline := time.Now().Add(45 * time.Second)
	for {
		if o, err = d.st.GetOrder(ctx, id); err != nil {
			t.Fatal(err)
		}
		if o.Status != store.StatusPaying {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reconciler did not settle the order within 45s; provider %+v", d.pay.Stats())
		}
		time.Sleep(100 * time.Millisecond)
	}
	charge, err := d.pay.Lookup(rid)
	if err != nil {
		t.Fatal(err)
	}
	if p, err = d.st.GetPayment(ctx, rid); err != nil {
		t.Fatal(err)
	}
	if o.Status != store.StatusPaid || p.Status != store.PaymentSucceeded || p.ProviderRef != charge.ProviderRef {
		t.Fatalf("settled as order %s, payment %s ref %q; the provider has %+v", o.Status, p.Status, p.ProviderRef, charge)
	}
	// Where the charge had been sent, the reconciler only asked about it;
	// where it had not, the reconciler sent it.
	sentSettled := d.pay.Stats().ByKey[rid].Received
	if point == failpoint.AfterPaymentBegin && sentSettled < 1 || point != failpoint.AfterPaymentBegin && sentSettled != sentBefore {
		t.Fatalf("charge requests: %d at the crash, %d once settled", sentBefore, sentSettled)
	}
	// The client retries its payment: PAID, and nothing is sent.
	r, err := d.do(http.MethodPost, b.base+"/orders/"+id+"/pay", user, "", "")
	if err != nil || r.Status != http.StatusOK || r.field("status") != string(store.StatusPaid) {
		t.Fatalf("pay again: %v %v", r, err)
	}
	st := d.pay.Stats()
	if st.Charges != 1 || st.ByKey[rid].Charged != 1 || st.ByKey[rid].Received != sentSettled {
		t.Fatalf("provider: %d charges, key %+v (%d requests before the retry); want one charge and no new request", st.Charges, st.ByKey[rid], sentSettled)
	}
	t.Logf("%s: settled %s by B, provider ref %s; charge requests: %d at the crash, %d in all; one charge", point, o.Status, p.ProviderRef, sentBefore, st.ByKey[rid].Received)
	d.verdict(1, []audit.Response{response(user, "k", created)})
}
