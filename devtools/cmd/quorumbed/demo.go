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
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quorumlock/quorumlock/devtools/audit"
	"github.com/quorumlock/quorumlock/devtools/fakepay"
	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/quorum"
)

// demoSecret signs the demo's tokens; it is used only on loopback.
const demoSecret = "demo-secret-for-loopback-only-32b"

// demoCallbackSecret signs fakepay's callbacks in the demo, on loopback only.
const demoCallbackSecret = "demo-callback-secret-loopback-32"

// demoBins are the binaries the demo runs.
type demoBins struct {
	ordersd   string // three instances, and its migrate, seed and token tools
	quorumctl string // the operator's view
	shipper   string // the consumer of the order events
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
	// The first acquisition opens the connections and loads the scripts;
	// on a loaded machine it can outlast the default 500 ms lock wait, and
	// the order would be placed by Postgres alone, with no lease to show.
	env := append(demoEnv(base, b, b.Postgres.DSN(), payURL), "ORDERS_LOCK_WAIT=3s")
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
// ORDERS_* settings (its masters, Postgres at dsn) and the payment provider
// at payURL, which win.
func demoEnv(base []string, b *testbed.Bed, dsn, payURL string) []string {
	return slices.Concat(base, []string{
		"ORDERS_REDIS_ADDRS=" + strings.Join(b.RedisAddrs(), ","),
		"ORDERS_DATABASE_URL=" + dsn,
		"ORDERS_JWT_SECRET=" + demoSecret,
		"ORDERS_LOCK_FALLBACK=db",
		// The demo shows the stock lock at work on each order (its leases in
		// the log and the operator's view); ordersd's default, auto, takes
		// it only for a product with company, which a demo's few orders
		// rarely are.
		"ORDERS_LOCK=on",
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

	rows, stock, verdict, err := auditProduct42(ctx, dsn, 1, resps, out)
	if err != nil {
		return "", err
	}
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

// auditProduct42 reads the orders and the stock of product 42 at dsn,
// judges them with resps, every final answer the clients got, against the
// initial stock, and prints the count, the stock left and the verdict.
func auditProduct42(ctx context.Context, dsn string, initial int64, resps []audit.Response, out io.Writer) ([]audit.OrderRow, int64, audit.Report, error) {
	rows, stock, err := orderState(ctx, dsn)
	if err != nil {
		return nil, 0, audit.Report{}, err
	}
	verdict := audit.Orders(map[string]audit.Stock{"42": {Initial: initial, Final: stock}}, rows, resps)
	fmt.Fprintf(out, "\norders in Postgres: %d, stock of product 42 left: %d\naudit: %v\n", len(rows), stock, verdict)
	return rows, stock, verdict, nil
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
