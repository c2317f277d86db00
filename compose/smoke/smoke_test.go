package smoke

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Paths relative to this package's directory, where go test runs it.
const (
	composeDir = ".."
	repoRoot   = "../.."
	rulesFile  = "../../deploy/prometheus/alerts.yml"
)

// Deadlines. The machine may be small and loaded: they are generous, and
// every wait ends as soon as what it waits for happens.
const (
	testBudget    = 9 * time.Minute // the whole test, cleanup included, within go test's -timeout
	buildTimeout  = 5 * time.Minute // go build of ordersd and fakepay
	upTimeout     = 5 * time.Minute // docker-compose up -d --build
	healthTimeout = 4 * time.Minute // every service healthy
	pollTimeout   = 2 * time.Minute // each HTTP condition (order, metrics, Prometheus)
	downTimeout   = 3 * time.Minute // logs and docker-compose down -v in the cleanup
	pollEvery     = 500 * time.Millisecond
)

// The ordersd instances, their services in docker-compose.yml and the
// variables that publish their ports.
var instances = []struct{ service, portVar string }{
	{"ordersd1", "QUORUMLOCK_ORDERSD1_PORT"},
	{"ordersd2", "QUORUMLOCK_ORDERSD2_PORT"},
	{"ordersd3", "QUORUMLOCK_ORDERSD3_PORT"},
}

// images returns the images the stack runs and does not build, as
// docker-compose.yml names them.
func images() []string {
	env := func(name, def string) string {
		if v := os.Getenv(name); v != "" {
			return v
		}
		return def
	}
	return []string{
		env("QUORUMLOCK_REDIS_IMAGE", "quorumlock/redis:bookworm"),
		env("QUORUMLOCK_POSTGRES_IMAGE", "quorumlock/postgres:bookworm"),
		env("QUORUMLOCK_PROMETHEUS_IMAGE", "quorumlock/prometheus:bookworm"),
	}
}

// unavailable skips the test, or fails it when CI=true: CI must not pass
// by skipping.
func unavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: failing instead of skipping)", msg)
	}
	t.Skip(msg)
}

// requireDocker checks for docker, its engine, docker-compose and the
// images.
func requireDocker(t *testing.T) {
	t.Helper()
	if os.Getenv("QUORUMLOCK_TESTBED") == "local" {
		t.Skip("QUORUMLOCK_TESTBED=local: this run is for the local provider; the compose smoke test needs Docker")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		unavailable(t, "docker is not on PATH: install Docker (apt-get install -y docker.io) to run the compose smoke test")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "version", "--format", "{{.Server.Version}}").CombinedOutput(); err != nil {
		unavailable(t, "the Docker engine does not answer (%v): %s", err, lastLine(out))
	}
	if _, err := exec.LookPath("docker-compose"); err != nil {
		unavailable(t, "docker-compose is not on PATH: install it (apt-get install -y docker-compose, or make deps)")
	}
	var missing []string
	for _, image := range images() {
		if err := exec.CommandContext(ctx, "docker", "image", "inspect", image).Run(); err != nil {
			missing = append(missing, image)
		}
	}
	if len(missing) > 0 {
		unavailable(t, "images missing: %s; build them with `make images` (or set QUORUMLOCK_*_IMAGE to images this machine has)", strings.Join(missing, ", "))
	}
}

func lastLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	return s[strings.LastIndexByte(s, '\n')+1:]
}

// stack is one compose project of the smoke test.
type stack struct {
	t       *testing.T
	project string   // docker-compose -p
	file    string   // absolute path of docker-compose.yml
	image   string   // the ordersd image it builds
	env     []string // docker-compose's environment
	ports   map[string]int
	secrets []string // never printed: redact replaces them
}

// redact replaces every secret in s.
func (s *stack) redact(text string) string {
	for _, secret := range s.secrets {
		if secret != "" {
			text = strings.ReplaceAll(text, secret, "[REDACTED]")
		}
	}
	return text
}

func (s *stack) fatalf(format string, args ...any) {
	s.t.Helper()
	s.t.Fatal(s.redact(fmt.Sprintf(format, args...)))
}

func (s *stack) logf(format string, args ...any) {
	s.t.Helper()
	s.t.Log(s.redact(fmt.Sprintf(format, args...)))
}

// run runs name args in dir with the stack's environment and returns its
// output (stdout and stderr), redacted.
func (s *stack) run(ctx context.Context, timeout time.Duration, dir, name string, args ...string) (string, error) {
	return s.runEnv(ctx, timeout, dir, nil, name, args...)
}

// runEnv is run with variables added to the stack's environment.
func (s *stack) runEnv(ctx context.Context, timeout time.Duration, dir string, env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(slices.Clip(s.env), env...)
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (after %v)", ctx.Err(), timeout)
	}
	return s.redact(out.String()), err
}

// compose runs docker-compose on the stack's project.
func (s *stack) compose(ctx context.Context, timeout time.Duration, args ...string) (string, error) {
	return s.run(ctx, timeout, composeDir, "docker-compose", append([]string{"-f", s.file, "-p", s.project}, args...)...)
}

// tail returns the last n lines of out.
func tail(out string, n int) string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[... %d lines]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// freePorts returns n distinct ports free on 127.0.0.1 now. Another
// process could take one before docker-compose binds it; then up fails and
// says which.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// buildContext builds ordersd and fakepay statically into a fresh build
// context with the Dockerfile and .dockerignore of compose/, so that the
// test needs no compose/bin and leaves the checkout alone.
func (s *stack) buildContext(ctx context.Context) string {
	s.t.Helper()
	dir := s.t.TempDir()
	bin := filepath.Join(dir, "bin") + string(filepath.Separator)
	goBin, err := exec.LookPath("go")
	if err != nil {
		s.fatalf("go is not on PATH: %v", err)
	}
	out, err := s.runEnv(ctx, buildTimeout, repoRoot, []string{"CGO_ENABLED=0"}, goBin, "build", "-o", bin, "./cmd/ordersd", "./devtools/cmd/fakepay", "./cmd/shipper")
	if err != nil {
		s.fatalf("CGO_ENABLED=0 go build ./cmd/ordersd ./devtools/cmd/fakepay ./cmd/shipper: %v\n%s", err, out)
	}
	for _, name := range []string{"ordersd.Dockerfile", ".dockerignore"} {
		b, err := os.ReadFile(filepath.Join(composeDir, name))
		if err != nil {
			s.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			s.t.Fatal(err)
		}
	}
	return dir
}

// newStack prepares a project of its own: its name, free ports, fresh
// secrets, its own ordersd image tag and build context. It registers the
// cleanup (logs on failure, then down -v) before anything is started.
func newStack(ctx context.Context, t *testing.T) *stack {
	t.Helper()
	file, err := filepath.Abs(filepath.Join(composeDir, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	project := "qlsmoke" + randomHex(t, 4)
	s := &stack{
		t:       t,
		project: project,
		file:    file,
		image:   "quorumlock/ordersd:" + project,
		ports:   map[string]int{},
	}
	jwtSecret, callbackSecret := randomHex(t, 32), randomHex(t, 32)
	s.secrets = []string{jwtSecret, callbackSecret}
	s.env = append(os.Environ(),
		"ORDERS_JWT_SECRET="+jwtSecret,
		"FAKEPAY_CALLBACK_SECRET="+callbackSecret,
		"QUORUMLOCK_ORDERSD_IMAGE="+s.image,
	)
	vars := []string{"QUORUMLOCK_FAKEPAY_PORT", "QUORUMLOCK_PROMETHEUS_PORT"}
	for _, in := range instances {
		vars = append(vars, in.portVar)
	}
	for i, port := range freePorts(t, len(vars)) {
		s.ports[vars[i]] = port
		s.env = append(s.env, vars[i]+"="+strconv.Itoa(port))
	}
	s.env = append(s.env, "QUORUMLOCK_ORDERSD_CONTEXT="+s.buildContext(ctx))

	t.Cleanup(func() {
		// t.Context is done by now; the cleanup has its own deadline.
		ctx := context.Background()
		if t.Failed() {
			out, err := s.compose(ctx, downTimeout, "ps")
			t.Logf("docker-compose -p %s ps (%v):\n%s", project, err, out)
			out, err = s.compose(ctx, downTimeout, "logs", "--no-color", "--tail", "80")
			t.Logf("docker-compose -p %s logs --tail 80 (%v):\n%s", project, err, out)
		}
		if out, err := s.compose(ctx, downTimeout, "down", "-v", "--remove-orphans", "--timeout", "10"); err != nil {
			t.Errorf("docker-compose -p %s down -v: %v\n%s", project, err, tail(out, 30))
		}
		if out, err := s.run(ctx, time.Minute, ".", "docker", "image", "rm", s.image); err != nil && !strings.Contains(out, "No such image") {
			t.Logf("docker image rm %s: %v: %s", s.image, err, strings.TrimSpace(out))
		}
	})
	return s
}

// up starts the stack and waits until every service is healthy, with
// compose/wait-healthy.sh, the wait of `make up`.
func (s *stack) up(ctx context.Context) {
	s.t.Helper()
	start := time.Now()
	out, err := s.compose(ctx, upTimeout, "up", "-d", "--build")
	if err != nil {
		s.fatalf("docker-compose -p %s up -d --build: %v\n%s", s.project, err, tail(out, 40))
	}
	s.logf("up -d --build: %v", time.Since(start).Round(time.Millisecond))
	secs := strconv.Itoa(int(healthTimeout / time.Second))
	out, err = s.run(ctx, healthTimeout+time.Minute, composeDir, "bash", "wait-healthy.sh", "-p", s.project, "-t", secs)
	if err != nil {
		s.fatalf("wait-healthy.sh: %v\n%s", err, out)
	}
	s.logf("%s (%v since up)", strings.TrimSpace(lastLine([]byte(out))), time.Since(start).Round(time.Millisecond))
}

// poll calls check until it reports done, an error that is final, or the
// timeout passes; then it fails the test with what it waited for and the
// last answer.
func (s *stack) poll(ctx context.Context, timeout time.Duration, what string, check func(ctx context.Context) (done bool, last string, err error)) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		done, last, err := check(ctx)
		if err != nil {
			s.fatalf("%s: %v", what, err)
		}
		if done {
			s.logf("%s: after %v", what, time.Since(start).Round(time.Millisecond))
			return
		}
		select {
		case <-ctx.Done():
			s.fatalf("%s: not within %v; last answer: %s", what, timeout, last)
		case <-tick.C:
		}
	}
}

var client = &http.Client{Timeout: 10 * time.Second}

// get returns the status and body of GET url, or a description of the
// transport error as last.
func get(ctx context.Context, rawURL string) (status int, body []byte, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return resp.StatusCode, body, err
}

func (s *stack) base(portVar string) string {
	return "http://127.0.0.1:" + strconv.Itoa(s.ports[portVar])
}

// token is an HS256 JWT for user, signed with the stack's secret, with the
// claims ordersd requires (orders/auth): sub, iat and exp (at most
// ORDERS_JWT_MAX_LIFETIME, 24h by default, away).
func (s *stack) token(user string) string {
	s.t.Helper()
	now := time.Now()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
		Subject:   user,
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(15 * time.Minute)),
	}).SignedString([]byte(s.secrets[0]))
	if err != nil {
		s.t.Fatal(err)
	}
	s.secrets = append(s.secrets, tok)
	return tok
}

// placeOrder POSTs one order to the instance at base. A retry reuses the
// Idempotency-Key, so it can never place a second order: it is retried
// while the instance does not answer, answers 5xx, or 202 (in flight).
func (s *stack) placeOrder(ctx context.Context, base, token, key, product string) (orderID string) {
	s.t.Helper()
	body := fmt.Sprintf(`{"productId":%q,"quantity":1,"addressVersion":"v1"}`, product)
	s.poll(ctx, pollTimeout, "POST "+base+"/orders (Idempotency-Key "+key+")", func(ctx context.Context) (bool, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/orders", strings.NewReader(body))
		if err != nil {
			return false, "", err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return false, err.Error(), nil
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		_ = resp.Body.Close()
		last := fmt.Sprintf("%d %s", resp.StatusCode, bytes.TrimSpace(b))
		switch {
		case resp.StatusCode == http.StatusCreated:
			var created struct {
				OrderID string `json:"orderId"`
				Status  string `json:"status"`
			}
			if err := json.Unmarshal(b, &created); err != nil || created.OrderID == "" || created.Status != "CREATED" {
				return false, last, fmt.Errorf("201 without a CREATED order: %s", last)
			}
			orderID = created.OrderID
			return true, last, nil
		case resp.StatusCode == http.StatusAccepted || resp.StatusCode >= 500:
			return false, last, nil
		}
		return false, last, fmt.Errorf("answered %s", last)
	})
	return orderID
}

// alertGroups returns the rule groups of alerts.yml, each with its alert
// names in order.
func alertGroups(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	groups := map[string][]string{}
	var cur string
	re := regexp.MustCompile(`(?m)^\s*- (name|alert):\s*(\S+)\s*$`)
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		if m[1] == "name" {
			cur = m[2]
			groups[cur] = []string{}
			continue
		}
		if cur == "" {
			t.Fatalf("%s: alert %s before any group", rulesFile, m[2])
		}
		groups[cur] = append(groups[cur], m[2])
	}
	if len(groups) == 0 {
		t.Fatalf("%s has no rule groups", rulesFile)
	}
	return groups
}

// promAPI GETs a Prometheus API path and decodes its data into v.
func promAPI(ctx context.Context, base, path string, v any) (last string, err error) {
	status, body, err := get(ctx, base+path)
	if err != nil {
		return err.Error(), err
	}
	last = fmt.Sprintf("%d %.500s", status, body)
	var env struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
	}
	if status != http.StatusOK {
		return last, fmt.Errorf("status %d", status)
	}
	if err := json.Unmarshal(body, &env); err != nil || env.Status != "success" {
		return last, fmt.Errorf("not a successful API answer")
	}
	return last, json.Unmarshal(env.Data, v)
}

// TestStack is the smoke test of the whole compose stack; see the package
// documentation.
func TestStack(t *testing.T) {
	requireDocker(t)
	budget := testBudget
	if d, ok := t.Deadline(); ok {
		// Leave the cleanup its time before go test's -timeout.
		budget = min(budget, time.Until(d)-downTimeout-30*time.Second)
		if budget < 2*time.Minute {
			t.Fatalf("go test -timeout leaves %v: the compose smoke test needs minutes (use -timeout 15m)", time.Until(d).Round(time.Second))
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), budget)
	defer cancel()
	start := time.Now()

	s := newStack(ctx, t)
	s.logf("project %s, ports %v, built in %v", s.project, s.ports, time.Since(start).Round(time.Millisecond))
	s.up(ctx)

	// A product with stock, through the first instance's own configuration
	// (ORDERS_DATABASE_URL is in its environment).
	const product = "4242"
	out, err := s.compose(ctx, pollTimeout, "exec", "-T", "ordersd1", "ordersd", "seed", "-product", product, "-stock", "10", "-price", "1999")
	if err != nil {
		s.fatalf("ordersd seed: %v\n%s", err, out)
	}

	// One order through each instance, each counted by that instance alone.
	tok := s.token("smoke-user")
	for i, in := range instances {
		base := s.base(in.portVar)
		id := s.placeOrder(ctx, base, tok, fmt.Sprintf("%s-order-%d", s.project, i+1), product)
		s.logf("%s: order %s", in.service, id)
		const placed = `orders_place_total{outcome="created"} 1`
		s.poll(ctx, pollTimeout, in.service+" /metrics shows "+placed, func(ctx context.Context) (bool, string, error) {
			status, body, err := get(ctx, base+"/metrics")
			if err != nil {
				return false, err.Error(), nil
			}
			if status != http.StatusOK {
				return false, fmt.Sprintf("%d %.300s", status, body), nil
			}
			// Every outcome has its series; the one that counts is
			// "created", wherever the exposition sorts it.
			last := "no orders_place_total{outcome=\"created\"} series"
			for line := range strings.Lines(string(body)) {
				if strings.HasPrefix(line, `orders_place_total{outcome="created"}`) {
					if strings.TrimSpace(line) == placed {
						return true, "", nil
					}
					last = strings.TrimSpace(line)
				}
			}
			return false, last, nil
		})
	}

	prom := s.base("QUORUMLOCK_PROMETHEUS_PORT")

	// Every group of alerts.yml, with its alerts.
	want := alertGroups(t)
	s.poll(ctx, pollTimeout, "Prometheus /api/v1/rules lists the groups of alerts.yml", func(ctx context.Context) (bool, string, error) {
		var data struct {
			Groups []struct {
				Name  string `json:"name"`
				File  string `json:"file"`
				Rules []struct {
					Name string `json:"name"`
				} `json:"rules"`
			} `json:"groups"`
		}
		last, err := promAPI(ctx, prom, "/api/v1/rules?type=alert", &data)
		if err != nil {
			return false, last, nil
		}
		got := map[string][]string{}
		for _, g := range data.Groups {
			names := []string{}
			for _, r := range g.Rules {
				names = append(names, r.Name)
			}
			got[g.Name] = names
		}
		if len(got) != len(want) {
			return false, fmt.Sprintf("groups %v, want %v", got, want), nil
		}
		for name, alerts := range want {
			if !slices.Equal(got[name], alerts) {
				return false, fmt.Sprintf("group %s has %v, want %v", name, got[name], alerts), nil
			}
		}
		return true, "", nil
	})

	// The three instances, scraped and up.
	s.poll(ctx, pollTimeout, "Prometheus scrapes ordersd1..3 and the shipper, health up", func(ctx context.Context) (bool, string, error) {
		var data struct {
			ActiveTargets []struct {
				Labels    map[string]string `json:"labels"`
				Health    string            `json:"health"`
				LastError string            `json:"lastError"`
			} `json:"activeTargets"`
		}
		last, err := promAPI(ctx, prom, "/api/v1/targets?state=active", &data)
		if err != nil {
			return false, last, nil
		}
		up := map[string]string{}
		for _, tg := range data.ActiveTargets {
			if tg.Labels["job"] == "ordersd" || tg.Labels["job"] == "shipper" {
				up[tg.Labels["instance"]] = tg.Health + " " + tg.LastError
			}
		}
		for _, in := range instances {
			if strings.TrimSpace(up[in.service+":8080"]) != "up" {
				return false, fmt.Sprintf("ordersd targets %v", up), nil
			}
		}
		if strings.TrimSpace(up["shipper:8091"]) != "up" {
			return false, fmt.Sprintf("shipper target %v", up), nil
		}
		return true, "", nil
	})

	// And what they said: the three orders, summed over the job.
	query := `sum(orders_place_total{job="ordersd",outcome="created"})`
	s.poll(ctx, pollTimeout, "Prometheus: "+query+" = 3", func(ctx context.Context) (bool, string, error) {
		var data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		}
		last, err := promAPI(ctx, prom, "/api/v1/query?query="+url.QueryEscape(query), &data)
		if err != nil {
			return false, last, nil
		}
		if len(data.Result) == 1 && data.Result[0].Value[1] == "3" {
			return true, "", nil
		}
		return false, last, nil
	})

	// Every rule evaluated without error on the live series.
	s.poll(ctx, pollTimeout, "Prometheus evaluated every rule, health ok", func(ctx context.Context) (bool, string, error) {
		var data struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		}
		last, err := promAPI(ctx, prom, "/api/v1/rules", &data)
		if err != nil {
			return false, last, nil
		}
		var pending []string
		for _, g := range data.Groups {
			for _, r := range g.Rules {
				switch r.Health {
				case "ok":
				case "err":
					return false, "", errors.New(r.Name + ": " + r.LastError)
				default:
					pending = append(pending, r.Name+" "+r.Health)
				}
			}
		}
		return len(pending) == 0, fmt.Sprintf("not evaluated yet: %v", pending), nil
	})
	s.logf("stack checked in %v", time.Since(start).Round(time.Millisecond))
}

// TestPrometheusConfig checks compose/prometheus.yml with promtool, beside
// the rule file it loads (as the container sees them in /etc/prometheus).
// It needs no Docker.
func TestPrometheusConfig(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		unavailable(t, "promtool is not on PATH: run `make deps` (Debian's prometheus package)")
	}
	dir := t.TempDir()
	for src, dst := range map[string]string{filepath.Join(composeDir, "prometheus.yml"): "prometheus.yml", rulesFile: "alerts.yml"} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, dst), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, promtool, "check", "config", filepath.Join(dir, "prometheus.yml")).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check config compose/prometheus.yml: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "1 rule files found") {
		t.Fatalf("promtool found no rule file for compose/prometheus.yml:\n%s", out)
	}
}
