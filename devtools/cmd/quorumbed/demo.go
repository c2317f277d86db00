package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/quorumlock/quorumlock/devtools/audit"
	"github.com/quorumlock/quorumlock/devtools/fakepay"
	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/internal/syncbuf"
	"github.com/quorumlock/quorumlock/orders/watchdog"
	"github.com/quorumlock/quorumlock/quorum"
)

// demoSecret signs the demo's tokens; it is used only on loopback.
const demoSecret = "demo-secret-for-loopback-only-32b"

// demoCallbackSecret signs fakepay's callbacks in the demo, on loopback only.
const demoCallbackSecret = "demo-callback-secret-loopback-32"

// ordersdProc is one ordersd process of the demo.
type ordersdProc struct {
	name string
	url  string
	cmd  *exec.Cmd
	log  *syncbuf.Buffer // its stdout and stderr
	done chan struct{}
}

// seedScenario runs the seed scenario against three ordersd processes on
// the bed: a user clicks "buy" twice and the gateway retries once, so three
// identical requests for the last unit reach three instances. Then it runs
// the payment scenario, and ends with the operator's view (operatorView)
// while the instances and the bed are still up. The processes it starts
// (ordersd and quorumctl, of bins) inherit base, then the bed's ORDERS_*
// settings, which win.
func seedScenario(ctx context.Context, b *testbed.Bed, bins demoBins, base []string, out io.Writer) error {
	if err := trustBed(ctx, b); err != nil {
		return err
	}
	// The payment provider: fakepay on loopback, started once the first
	// ordersd (which takes its callbacks) is known.
	payLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer payLn.Close()
	payURL := "http://" + payLn.Addr().String()
	env := demoEnv(base, b, payURL)
	runTool := ordersdTool(ctx, bins.ordersd, env)
	if _, err := runTool("migrate"); err != nil {
		return err
	}
	if _, err := runTool("seed", "-product", "42", "-stock", "1", "-price", "1999"); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nproduct 42 has 1 unit in stock; starting three ordersd instances")
	procs, err := startInstances(ctx, bins.ordersd, env, out)
	defer stopAll(procs)
	if err != nil {
		return err
	}
	pay, stopPay, err := serveFakepay(payLn, procs[0].url)
	if err != nil {
		return err
	}
	defer stopPay()
	fmt.Fprintf(out, "  fakepay (the payment provider) at %s, calling back %s\n", payURL, procs[0].name)
	token, err := runTool("token", "-user", "u1001", "-ttl", "10m")
	if err != nil {
		return err
	}
	orderID, err := doubleClickScenario(ctx, procs, token, b.Postgres.DSN(), out)
	if err != nil {
		return err
	}
	if err := payScenario(ctx, procs, pay, token, orderID, out); err != nil {
		return err
	}
	if err := shipScenario(ctx, b, bins.shipper, env, orderID, out); err != nil {
		return err
	}
	if err := cartScenario(ctx, procs, runTool, b.Postgres.DSN(), out); err != nil {
		return err
	}
	return operatorView(ctx, procs, bins.quorumctl, env, time.Now(), out)
}

// trustBed lets the nodes of a brand-new bed, which has never held a lock,
// vote at once.
func trustBed(ctx context.Context, b *testbed.Bed) error {
	for _, n := range b.Redis {
		c := n.Admin()
		err := quorum.TrustNode(ctx, c)
		_ = c.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", n.Name(), err)
		}
	}
	return nil
}

// demoEnv is the environment of the demo's processes: base, then the bed's
// ORDERS_* settings and the payment provider at payURL, which win.
func demoEnv(base []string, b *testbed.Bed, payURL string) []string {
	return slices.Concat(base, []string{
		"ORDERS_REDIS_ADDRS=" + strings.Join(b.RedisAddrs(), ","),
		"ORDERS_DATABASE_URL=" + b.Postgres.DSN(),
		"ORDERS_JWT_SECRET=" + demoSecret,
		"ORDERS_LOCK_FALLBACK=db",
		"ORDERS_PAYMENT_URL=" + payURL,
		"ORDERS_PAYMENT_CALLBACK_SECRET=" + demoCallbackSecret,
		// The watchdog rounds often enough for orders_invariant_violations
		// to judge the state the scenarios leave.
		"ORDERS_INVARIANT_INTERVAL=" + demoInvariantInterval.String(),
	})
}

// ordersdTool runs one of ordersd's tool commands (migrate, seed, token)
// with env and returns its output, trimmed.
func ordersdTool(ctx context.Context, bin string, env []string) func(args ...string) (string, error) {
	return func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = env
		o, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("ordersd %s: %w: %s", strings.Join(args, " "), err, o)
		}
		return strings.TrimSpace(string(o)), nil
	}
}

// startInstances starts three ordersd processes with env and waits until
// each is ready. It returns the processes it started, also on error: the
// caller stops them.
func startInstances(ctx context.Context, bin string, env []string, out io.Writer) ([]*ordersdProc, error) {
	var procs []*ordersdProc
	for i := 1; i <= 3; i++ {
		p, err := startOrdersd(ctx, bin, fmt.Sprintf("ordersd%d", i), env)
		if err != nil {
			return procs, err
		}
		procs = append(procs, p)
	}
	for _, p := range procs {
		if err := p.waitReady(ctx); err != nil {
			return procs, err
		}
		fmt.Fprintf(out, "  %s ready at %s\n", p.name, p.url)
	}
	return procs, nil
}

// stopAll stops every process of procs.
func stopAll(procs []*ordersdProc) {
	for _, p := range procs {
		p.stop()
	}
}

// serveFakepay serves a fakepay provider on ln that calls back the
// ordersd at ordersdURL, and returns it with the function that stops it.
func serveFakepay(ln net.Listener, ordersdURL string) (*fakepay.Server, func(), error) {
	pay, err := fakepay.New(fakepay.WithCallback(ordersdURL+"/payments/callback", []byte(demoCallbackSecret)),
		fakepay.WithCallbackRetry(20, 100*time.Millisecond))
	if err != nil {
		return nil, nil, err
	}
	srv := &http.Server{Handler: pay.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return pay, func() {
		_ = srv.Close()
		_ = pay.Close()
	}, nil
}

// doubleClickScenario sends three identical requests for the last unit to
// the three instances at once, then one with the same key and another
// body, audits the database, and returns the one order's id.
func doubleClickScenario(ctx context.Context, procs []*ordersdProc, token, dsn string, out io.Writer) (string, error) {
	body := `{"productId": "42", "quantity": 1, "addressVersion": "v1", "couponId": null}`
	fmt.Fprintf(out, "\nu1001 clicks twice and the gateway retries: 3 x POST /orders, Idempotency-Key: req-001\n  %s\n", body)
	resps, err := clickThrice(ctx, procs, token, body, out)
	if err != nil {
		return "", err
	}
	mismatch := postOrder(ctx, procs[0].url, token, "req-001", `{"productId": "42", "quantity": 2, "addressVersion": "v1"}`)
	fmt.Fprintf(out, "\nsame key, quantity 2 instead of 1 -> %d %s\n", mismatch.status, mismatch.body)

	rows, stock, err := orderState(ctx, dsn)
	if err != nil {
		return "", err
	}
	verdict := audit.Orders(map[string]audit.Stock{"42": {Initial: 1, Final: stock}}, rows, resps)
	fmt.Fprintf(out, "\norders in Postgres: %d, stock of product 42 left: %d\naudit: %v\n", len(rows), stock, verdict)
	if !verdict.OK() || len(rows) != 1 || stock != 0 {
		return "", errors.New("the seed scenario did not end with exactly one order and stock 0")
	}
	return rows[0].OrderID, nil
}

// clickThrice posts body with the key req-001 to every instance at once,
// follows each answer 202 as a client would, prints the final answers and
// returns them for the audit.
func clickThrice(ctx context.Context, procs []*ordersdProc, token, body string, out io.Writer) ([]audit.Response, error) {
	results := make([]demoResult, len(procs))
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Go(func() { results[i] = postOrder(ctx, p.url, token, "req-001", body) })
	}
	wg.Wait()
	var resps []audit.Response
	for i, r := range results {
		if r.err != nil {
			return nil, fmt.Errorf("%s: %w", procs[i].name, r.err)
		}
		// A request answered 202 polls its Location, as a client would.
		first := r.status
		for tries := 0; r.status == http.StatusAccepted && tries < 50; tries++ {
			time.Sleep(100 * time.Millisecond)
			r = postOrder(ctx, procs[i].url, token, "req-001", body)
		}
		note := ""
		if first == http.StatusAccepted {
			note = " (first 202 in progress, then)"
		}
		fmt.Fprintf(out, "  %s ->%s %d replayed=%-5v %s\n", procs[i].name, note, r.status, r.replayed, r.body)
		resps = append(resps, audit.Response{UserID: "u1001", IdempotencyKey: "req-001", Status: r.status, Body: r.body, OrderID: r.orderID})
	}
	return resps, nil
}

// payScenario pays the order from all three instances at once while the
// provider loses its reply to the first charge request. Only one instance
// sends the charge; the order is settled by whatever answer comes first (the
// HTTP client's retry of the same request id, or the provider's signed
// callback), and the provider counts one charge.
func payScenario(ctx context.Context, procs []*ordersdProc, pay *fakepay.Server, token, orderID string, out io.Writer) error {
	rid := orderID + ":pay"
	if err := pay.Inject(rid, fakepay.FaultLoseReply, 1); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nthe user pays %s on all three instances at once; the provider loses its reply to the first charge request\n", orderID)
	results := make([]demoResult, len(procs))
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Go(func() { results[i] = send(ctx, http.MethodPost, p.url+"/orders/"+orderID+"/pay", token) })
	}
	wg.Wait()
	for i, r := range results {
		if r.err != nil {
			return fmt.Errorf("%s: pay: %w", procs[i].name, r.err)
		}
		fmt.Fprintf(out, "  %s -> %d %s\n", procs[i].name, r.status, r.body)
	}
	deadline := time.Now().Add(30 * time.Second)
	var last demoResult
	for {
		last = send(ctx, http.MethodGet, procs[1].url+"/orders/"+orderID, token)
		if last.err == nil && strings.Contains(last.body, `"status":"PAID"`) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the order was not settled by the callback: %s (provider: %+v)", last.body, pay.Stats().Callbacks)
		}
		time.Sleep(100 * time.Millisecond)
	}
	st := pay.Stats()
	for st.Callbacks.Delivered == 0 && time.Now().Before(deadline) { // the callback may still be on its way
		time.Sleep(50 * time.Millisecond)
		st = pay.Stats()
	}
	fmt.Fprintf(out, "  settled: %s\n", last.body)
	fmt.Fprintf(out, "provider: %d charge request(s) for %s, %d charge(s), %d signed callback(s) delivered to %s (a repeated request or callback changes nothing)\n",
		st.Requests, rid, st.Charges, st.Callbacks.Delivered, procs[0].name)
	if st.Charges != 1 {
		return fmt.Errorf("the provider charged %d times", st.Charges)
	}
	return nil
}

func send(ctx context.Context, method, url, token string) demoResult {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return demoResult{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return demoResult{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return demoResult{status: resp.StatusCode, body: string(b), err: err}
}

func startOrdersd(ctx context.Context, bin, name string, env []string) (*ordersdProc, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	_ = l.Close()
	p := &ordersdProc{name: name, url: "http://" + addr, log: &syncbuf.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, "serve", "-listen", addr, "-migrate=false")
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	return p, nil
}

func (p *ordersdProc) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited: %s", p.name, p.log.String())
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if resp, err := http.Get(p.url + "/readyz"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after 30s: %s", p.name, p.log.String())
}

// stop shuts the process down gracefully (SIGTERM), then kills it.
func (p *ordersdProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

type demoResult struct {
	status   int
	replayed bool
	body     string
	orderID  string
	err      error
}

func postOrder(ctx context.Context, url, token, key, body string) demoResult {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/orders", strings.NewReader(body))
	if err != nil {
		return demoResult{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return demoResult{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	r := demoResult{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true", body: string(b), err: err}
	if i := strings.Index(r.body, `"orderId":"`); i >= 0 {
		rest := r.body[i+len(`"orderId":"`):]
		r.orderID, _, _ = strings.Cut(rest, `"`)
	}
	return r
}

func orderState(ctx context.Context, dsn string) ([]audit.OrderRow, int64, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, 0, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, "SELECT order_id, user_id, idempotency_key, product_id, quantity, status FROM orders")
	if err != nil {
		return nil, 0, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (audit.OrderRow, error) {
		var o audit.OrderRow
		return o, r.Scan(&o.OrderID, &o.UserID, &o.IdempotencyKey, &o.ProductID, &o.Quantity, &o.Status)
	})
	if err != nil {
		return nil, 0, err
	}
	var stock int64
	err = conn.QueryRow(ctx, "SELECT available FROM product_stock WHERE product_id = '42'").Scan(&stock)
	return out, stock, err
}

// demoInvariantInterval is ORDERS_INVARIANT_INTERVAL of the demo's ordersd
// processes (the default is a minute): how often each one's watchdog checks
// the database and sets orders_invariant_violations.
const demoInvariantInterval = time.Second

// demoScrapeTimeout bounds the wait for every instance's /metrics to show
// what the operator's view prints.
const demoScrapeTimeout = 20 * time.Second

// demoStockKey is the stock lock of the demo's product (orders locks
// "stock:" + product id).
const demoStockKey = "stock:42"

// operatorView prints what an operator sees once the scenarios are done
// (they ended at ranUntil): the key metrics of every instance, scraped from
// its /metrics, then the output of quorumctl status, inspect and
// invariants, each run as its own process of the quorumctl binary with env,
// the environment the demo's ordersd processes run with.
func operatorView(ctx context.Context, procs []*ordersdProc, quorumctl string, env []string, ranUntil time.Time, out io.Writer) error {
	fmt.Fprintf(out, "\n=== the operator's view, after the run ===\n")
	// Each watchdog starts a round at least every demoInvariantInterval:
	// half an interval more, and one that began after the run has also
	// finished (a round takes milliseconds on loopback). The watchdog
	// exports no time of its last round to wait for instead.
	sets, err := scrapeFresh(ctx, procs, ranUntil.Add(demoInvariantInterval+demoInvariantInterval/2))
	if err != nil {
		return fmt.Errorf("operator's view: %w", err)
	}
	names := make([]string, len(procs))
	for i, p := range procs {
		names[i] = p.name
	}
	fmt.Fprintf(out, "\nmetrics, scraped from each instance's /metrics (all: the sum; for the gauge, the largest)\n")
	writeMetricTable(out, names, sets, operatorGroups(sets))

	for _, args := range [][]string{{"status"}, {"inspect", demoStockKey}, {"invariants"}} {
		if err := runQuorumctl(ctx, quorumctl, env, args, out); err != nil {
			return err
		}
	}
	return nil
}

// quorumctlTimeout bounds one quorumctl command of the operator's view.
const quorumctlTimeout = time.Minute

// runQuorumctl prints "$ quorumctl ARGS", then runs the quorumctl binary
// with args and the environment env (the last entry of a name wins, as
// os/exec passes it on), its standard input empty and its output, standard
// and error, written to out. A non-zero exit status is an error that names
// the command.
func runQuorumctl(ctx context.Context, quorumctl string, env, args []string, out io.Writer) error {
	line := strings.Join(args, " ")
	fmt.Fprintf(out, "\n$ quorumctl %s\n", line)
	ctx, cancel := context.WithTimeout(ctx, quorumctlTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, quorumctl, args...)
	cmd.Env = env
	// One writer for both: os/exec then lets one goroutine at a time write.
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("quorumctl %s: %w", line, err)
	}
	return nil
}

// scrapeFresh scrapes every instance's /metrics until each exports
// orders_invariant_violations for every check of the watchdog, and the
// clock has passed notBefore: the watchdog rounds every
// demoInvariantInterval, so by then a round has run on the state the
// scenarios left. It gives up after demoScrapeTimeout, naming what is
// missing.
func scrapeFresh(ctx context.Context, procs []*ordersdProc, notBefore time.Time) ([]metricSet, error) {
	deadline := time.Now().Add(demoScrapeTimeout)
	for {
		sets := make([]metricSet, len(procs))
		var missing []string
		for i, p := range procs {
			set, err := scrapeMetrics(ctx, p.url+"/metrics")
			if err != nil {
				missing = append(missing, fmt.Sprintf("%s: %v", p.name, err))
				continue
			}
			sets[i] = set
			for _, c := range watchdog.Checks() {
				if _, ok := set.sum(metricInvariantViolations, map[string]string{"check": c}); !ok {
					missing = append(missing, fmt.Sprintf("%s: no %s{check=%q}", p.name, metricInvariantViolations, c))
				}
			}
		}
		if len(missing) == 0 && !time.Now().Before(notBefore) {
			return sets, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("metrics not ready after %v: %s", demoScrapeTimeout, strings.Join(missing, "; "))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// The metrics the operator's view shows (orders/metrics.go,
// quorum/quorumprom, orders/watchdog).
const (
	metricPlace               = "orders_place_total"
	metricClaims              = "orders_idempotency_claims_total"
	metricFallback            = "orders_lock_fallback_total"
	metricAcquire             = "quorumlock_acquire_total"
	metricAcquireDuration     = "quorumlock_acquire_duration_seconds"
	metricLeaseLost           = "quorumlock_lease_lost_total"
	metricRequests            = "orders_http_request_duration_seconds"
	metricInvariantViolations = "orders_invariant_violations"
	metricInvariantErrors     = "orders_invariant_check_errors_total"
)

// Routes of the payment requests, as orders_http_request_duration_seconds
// labels them.
const (
	routePay      = "POST /orders/{id}/pay"
	routeCallback = "POST /payments/callback"
)

// metricSeries is one series of a scrape.
type metricSeries struct {
	labels map[string]string
	value  float64
}

// metricSet is one scrape, by metric name. A histogram or a summary NAME
// is kept as its NAME_count and NAME_sum series.
type metricSet map[string][]metricSeries

// sum returns the sum of the series of name whose labels include match,
// and whether there was any.
func (m metricSet) sum(name string, match map[string]string) (float64, bool) {
	total, found := 0.0, false
	for _, s := range m[name] {
		if matches(s.labels, match) {
			total += s.value
			found = true
		}
	}
	return total, found
}

// labelValues returns the values label takes in the series of name.
func (m metricSet) labelValues(name, label string) []string {
	var out []string
	for _, s := range m[name] {
		if v, ok := s.labels[label]; ok && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

func matches(labels, match map[string]string) bool {
	for k, v := range match {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// scrapeMetrics fetches url and parses it as the Prometheus text format.
func scrapeMetrics(ctx context.Context, url string) (metricSet, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("scrape: %w", err)
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	return parseMetrics(resp.Body)
}

// parseMetrics reads the Prometheus text exposition format.
func parseMetrics(r io.Reader) (metricSet, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	set := metricSet{}
	for name, mf := range families {
		for _, m := range mf.GetMetric() {
			labels := make(map[string]string, len(m.GetLabel()))
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			add := func(name string, v float64) {
				set[name] = append(set[name], metricSeries{labels: labels, value: v})
			}
			switch {
			case m.GetCounter() != nil:
				add(name, m.GetCounter().GetValue())
			case m.GetGauge() != nil:
				add(name, m.GetGauge().GetValue())
			case m.GetUntyped() != nil:
				add(name, m.GetUntyped().GetValue())
			case m.GetHistogram() != nil:
				add(name+"_count", float64(m.GetHistogram().GetSampleCount()))
				add(name+"_sum", m.GetHistogram().GetSampleSum())
			case m.GetSummary() != nil:
				add(name+"_count", float64(m.GetSummary().GetSampleCount()))
				add(name+"_sum", m.GetSummary().GetSampleSum())
			}
		}
	}
	return set, nil
}

// How a row of the operator's table combines its instances.
const (
	rowSum  = iota // a counter: the instances add up
	rowMax         // a gauge of one shared database: the largest
	rowMean        // a histogram's mean: sum of sums over sum of counts
)

// metricRow is one line of the operator's table: a series, or a set of
// series summed, on every instance.
type metricRow struct {
	label string
	kind  int
	name  string            // the metric (for rowMean, the histogram's name)
	match map[string]string // the series of name that the row adds up
}

// metricGroup is a titled block of rows.
type metricGroup struct {
	title string
	rows  []metricRow
}

// operatorGroups picks the rows of the operator's table from the scrapes:
// every label value any instance exports, and always the few an operator
// must see even at zero (orders created, stale fences, fallbacks).
func operatorGroups(sets []metricSet) []metricGroup {
	placeOrder := []string{"created", "replayed", "in_progress", "out_of_stock", "fingerprint_mismatch", "unknown_product",
		"stale_fence", "lock_busy", "lock_unavailable", "shed", "cancelled", "invalid", "error"}
	places := slices.DeleteFunc(seenValues(sets, metricPlace, "outcome", []string{"created"}, placeOrder), func(v string) bool { return v == "stale_fence" })
	claimOrder := []string{"CREATED", "IN_PROGRESS", "SUCCESS", "FINGERPRINT_MISMATCH", "TAKEOVER", "UNAVAILABLE"}
	acquireOrder := []string{"acquired", "not_acquired", "unavailable", "canceled", "error"}
	waits := acquireWaits(sets, acquireOrder)
	checks := watchdog.Checks()
	return []metricGroup{
		{"POST /orders answers, by the outcome that decided them (" + metricPlace + ")", byLabel(rowSum, metricPlace, "outcome", places, nil)},
		{"fence rejections (" + metricPlace + ")", byLabel(rowSum, metricPlace, "outcome", []string{"stale_fence"}, nil)},
		{"idempotency claims, by outcome (" + metricClaims + ")", byLabel(rowSum, metricClaims, "outcome", seenValues(sets, metricClaims, "outcome", nil, claimOrder), nil)},
		{"stock lock acquisitions, by result (" + metricAcquire + ")", byLabel(rowSum, metricAcquire, "result", seenValues(sets, metricAcquire, "result", []string{"acquired"}, acquireOrder), nil)},
		{"stock lock wait, mean per acquisition (" + metricAcquireDuration + ")", byLabel(rowMean, metricAcquireDuration, "result", waits, nil)},
		{"leases lost while held (" + metricLeaseLost + ")", []metricRow{{label: "all reasons", kind: rowSum, name: metricLeaseLost}}},
		{"fallbacks to Postgres when the lock was out of reach (" + metricFallback + ")", byLabel(rowSum, metricFallback, "mode", seenValues(sets, metricFallback, "mode", []string{"db", "reject"}, []string{"db", "reject"}), nil)},
		{"payment requests and provider callbacks, by status (" + metricRequests + "_count)", paymentRows(sets)},
		{"invariant violations, rows per check at the last round (" + metricInvariantViolations + ")", byLabel(rowMax, metricInvariantViolations, "check", seenValues(sets, metricInvariantViolations, "check", checks, checks), nil)},
		{"failed watchdog rounds (" + metricInvariantErrors + ")", []metricRow{{label: "all rounds", kind: rowSum, name: metricInvariantErrors}}},
	}
}

// seenValues returns always and every value label takes in the series of
// name on any instance, in the order of order (the values it does not
// name last, alphabetically).
func seenValues(sets []metricSet, name, label string, always, order []string) []string {
	seen := slices.Clone(always)
	for _, s := range sets {
		for _, v := range s.labelValues(name, label) {
			if !slices.Contains(seen, v) {
				seen = append(seen, v)
			}
		}
	}
	rank := func(v string) int {
		if i := slices.Index(order, v); i >= 0 {
			return i
		}
		return len(order)
	}
	slices.SortFunc(seen, func(a, b string) int {
		if d := rank(a) - rank(b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return seen
}

// byLabel returns a row of kind for each value of label in vals, on the
// metric name, its series narrowed further by extra.
func byLabel(kind int, name, label string, vals []string, extra map[string]string) []metricRow {
	var rows []metricRow
	for _, v := range vals {
		match := map[string]string{label: v}
		lbl := fmt.Sprintf("%s=%q", label, v)
		for k, ev := range extra {
			match[k] = ev
			lbl = fmt.Sprintf("%s=%q,%s", k, ev, lbl)
		}
		rows = append(rows, metricRow{label: lbl, kind: kind, name: name, match: match})
	}
	return rows
}

// acquireWaits returns the lock results, in order, that some instance
// timed at least once.
func acquireWaits(sets []metricSet, order []string) []string {
	var waits []string
	for _, r := range seenValues(sets, metricAcquireDuration+"_count", "result", nil, order) {
		for _, s := range sets {
			if n, _ := s.sum(metricAcquireDuration+"_count", map[string]string{"result": r}); n > 0 {
				waits = append(waits, r)
				break
			}
		}
	}
	return waits
}

// paymentRows returns a row per status code of the payment requests, then
// of the provider's callbacks.
func paymentRows(sets []metricSet) []metricRow {
	var rows []metricRow
	for _, route := range []string{routePay, routeCallback} {
		var codes []string
		for _, s := range sets {
			for _, sr := range s[metricRequests+"_count"] {
				if c := sr.labels["code"]; sr.labels["route"] == route && !slices.Contains(codes, c) {
					codes = append(codes, c)
				}
			}
		}
		slices.Sort(codes)
		rows = append(rows, byLabel(rowSum, metricRequests+"_count", "code", codes, map[string]string{"route": route})...)
	}
	return rows
}

// cells returns the row's value on every instance and over all of them,
// rendered; "-" where there is nothing to show.
func (r metricRow) cells(sets []metricSet) []string {
	out := make([]string, 0, len(sets)+1)
	var total, sums, counts float64
	seen := false
	for _, s := range sets {
		switch r.kind {
		case rowMean:
			sum, _ := s.sum(r.name+"_sum", r.match)
			n, _ := s.sum(r.name+"_count", r.match)
			sums, counts = sums+sum, counts+n
			out = append(out, meanCell(sum, n))
		case rowMax:
			v, ok := s.sum(r.name, r.match)
			if !ok {
				out = append(out, "-")
				continue
			}
			if !seen || v > total {
				total = v
			}
			seen = true
			out = append(out, strconv.FormatFloat(v, 'f', -1, 64))
		default:
			v, _ := s.sum(r.name, r.match) // a counter never incremented is 0
			total += v
			seen = true
			out = append(out, strconv.FormatFloat(v, 'f', -1, 64))
		}
	}
	switch {
	case r.kind == rowMean:
		out = append(out, meanCell(sums, counts))
	case !seen:
		out = append(out, "-")
	default:
		out = append(out, strconv.FormatFloat(total, 'f', -1, 64))
	}
	return out
}

// meanCell renders sum/n seconds as a duration, or "-" when n is 0.
func meanCell(sum, n float64) string {
	if n == 0 {
		return "-"
	}
	d := time.Duration(sum / n * float64(time.Second))
	return d.Round(10 * time.Microsecond).String()
}

// noSeries labels the row of a group that no instance has a series of.
const noSeries = "(no series)"

// writeMetricTable prints the groups as one table: a title line per group,
// then its rows indented, with one right-aligned column per instance (the
// scrapes of sets, named by names) and a last column over all of them.
func writeMetricTable(out io.Writer, names []string, sets []metricSet, groups []metricGroup) {
	heads := append(slices.Clone(names), "all")
	widths := make([]int, len(heads))
	for i, h := range heads {
		widths[i] = len(h)
	}
	labelWidth := 0
	cells := make([][][]string, len(groups))
	for g, grp := range groups {
		if len(grp.rows) == 0 {
			labelWidth = max(labelWidth, len(noSeries))
		}
		for _, r := range grp.rows {
			c := r.cells(sets)
			for i, v := range c {
				widths[i] = max(widths[i], len(v))
			}
			labelWidth = max(labelWidth, len(r.label))
			cells[g] = append(cells[g], c)
		}
	}
	line := func(label string, cols []string) {
		var b strings.Builder
		fmt.Fprintf(&b, "    %-*s", labelWidth, label)
		for i, v := range cols {
			fmt.Fprintf(&b, "  %*s", widths[i], v)
		}
		fmt.Fprintln(out, b.String())
	}
	line("", heads)
	for g, grp := range groups {
		fmt.Fprintf(out, "  %s\n", grp.title)
		if len(grp.rows) == 0 {
			line(noSeries, slices.Repeat([]string{"-"}, len(heads)))
		}
		for i, r := range grp.rows {
			line(r.label, cells[g][i])
		}
	}
}
