package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quorumlock/quorumlock/integration/checker"
	"github.com/quorumlock/quorumlock/integration/testbed"
	"github.com/quorumlock/quorumlock/orders/payment/fakepay"
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
	log  *bytes.Buffer
	done chan struct{}
}

// seedScenario runs the seed scenario against three ordersd processes on
// the bed: a user clicks "buy" twice and the gateway retries once, so three
// identical requests for the last unit reach three instances.
func seedScenario(ctx context.Context, b *testbed.Bed, bin string, out io.Writer) error {
	// A brand-new bed has never held a lock: let its nodes vote at once.
	for _, n := range b.Redis {
		c := n.Admin()
		err := quorum.TrustNode(ctx, c)
		_ = c.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", n.Name(), err)
		}
	}
	// The payment provider: fakepay on loopback, started once the first
	// ordersd (which takes its callbacks) is known.
	payLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer payLn.Close()
	payURL := "http://" + payLn.Addr().String()
	env := append(os.Environ(),
		"ORDERS_REDIS_ADDRS="+strings.Join(b.RedisAddrs(), ","),
		"ORDERS_DATABASE_URL="+b.Postgres.DSN(),
		"ORDERS_JWT_SECRET="+demoSecret,
		"ORDERS_LOCK_FALLBACK=db",
		"ORDERS_PAYMENT_URL="+payURL,
		"ORDERS_PAYMENT_CALLBACK_SECRET="+demoCallbackSecret,
	)
	runTool := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = env
		o, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("ordersd %s: %w: %s", strings.Join(args, " "), err, o)
		}
		return strings.TrimSpace(string(o)), nil
	}
	if _, err := runTool("migrate"); err != nil {
		return err
	}
	if _, err := runTool("seed", "-product", "42", "-stock", "1", "-price", "1999"); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nproduct 42 has 1 unit in stock; starting three ordersd instances")
	var procs []*ordersdProc
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	for i := 1; i <= 3; i++ {
		p, err := startOrdersd(ctx, bin, fmt.Sprintf("ordersd%d", i), env)
		if err != nil {
			return err
		}
		procs = append(procs, p)
	}
	for _, p := range procs {
		if err := p.waitReady(ctx); err != nil {
			return err
		}
		fmt.Fprintf(out, "  %s ready at %s\n", p.name, p.url)
	}
	pay, err := fakepay.New(fakepay.WithCallback(procs[0].url+"/payments/callback", []byte(demoCallbackSecret)),
		fakepay.WithCallbackRetry(20, 100*time.Millisecond))
	if err != nil {
		return err
	}
	paySrv := &http.Server{Handler: pay.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = paySrv.Serve(payLn) }()
	defer func() {
		_ = paySrv.Close()
		_ = pay.Close()
	}()
	fmt.Fprintf(out, "  fakepay (the payment provider) at %s, calling back %s\n", payURL, procs[0].name)
	token, err := runTool("token", "-user", "u1001", "-ttl", "10m")
	if err != nil {
		return err
	}

	body := `{"productId": "42", "quantity": 1, "addressVersion": "v1", "couponId": null}`
	fmt.Fprintf(out, "\nu1001 clicks twice and the gateway retries: 3 x POST /orders, Idempotency-Key: req-001\n  %s\n", body)
	results := make([]demoResult, 3)
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = postOrder(ctx, p.url, token, "req-001", body)
		}()
	}
	wg.Wait()
	var resps []checker.Response
	for i, r := range results {
		if r.err != nil {
			return fmt.Errorf("%s: %w", procs[i].name, r.err)
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
		resps = append(resps, checker.Response{UserID: "u1001", IdempotencyKey: "req-001", Status: r.status, Body: r.body, OrderID: r.orderID})
	}

	mismatch := postOrder(ctx, procs[0].url, token, "req-001", `{"productId": "42", "quantity": 2, "addressVersion": "v1"}`)
	fmt.Fprintf(out, "\nsame key, quantity 2 instead of 1 -> %d %s\n", mismatch.status, mismatch.body)

	rows, stock, err := orderState(ctx, b.Postgres.DSN())
	if err != nil {
		return err
	}
	verdict := checker.Orders(map[string]checker.Stock{"42": {Initial: 1, Final: stock}}, rows, resps)
	fmt.Fprintf(out, "\norders in Postgres: %d, stock of product 42 left: %d\nchecker: %v\n", len(rows), stock, verdict)
	if !verdict.OK() || len(rows) != 1 || stock != 0 {
		return errors.New("the seed scenario did not end with exactly one order and stock 0")
	}
	return payScenario(ctx, procs, pay, token, rows[0].OrderID, out)
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
	p := &ordersdProc{name: name, url: "http://" + addr, log: &bytes.Buffer{}, done: make(chan struct{})}
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

func orderState(ctx context.Context, dsn string) ([]checker.OrderRow, int64, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, 0, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, "SELECT order_id, user_id, idempotency_key, product_id, quantity, status FROM orders")
	if err != nil {
		return nil, 0, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (checker.OrderRow, error) {
		var o checker.OrderRow
		return o, r.Scan(&o.OrderID, &o.UserID, &o.IdempotencyKey, &o.ProductID, &o.Quantity, &o.Status)
	})
	if err != nil {
		return nil, 0, err
	}
	var stock int64
	err = conn.QueryRow(ctx, "SELECT available FROM product_stock WHERE product_id = '42'").Scan(&stock)
	return out, stock, err
}

// findOrdersd locates the ordersd binary: the flag, then bin/ordersd, then PATH.
func findOrdersd(flagValue string) (string, error) {
	if flagValue != "" {
		if st, err := os.Stat(flagValue); err != nil || st.IsDir() {
			return "", fmt.Errorf("-ordersd %s: not an executable file", flagValue)
		}
		return filepath.Abs(flagValue)
	}
	if st, err := os.Stat(filepath.Join("bin", "ordersd")); err == nil && !st.IsDir() {
		return filepath.Abs(filepath.Join("bin", "ordersd"))
	}
	if p, err := exec.LookPath("ordersd"); err == nil {
		return p, nil
	}
	return "", errors.New("ordersd binary not found: run `go build -o bin/ordersd ./cmd/ordersd` or pass -ordersd")
}
