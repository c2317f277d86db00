package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/devtools/fakepay"
	"github.com/quorumlock/quorumlock/orders/payment"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testSecret = "whsec_do-not-print-me-4711"

// syncBuffer is a goroutine-safe output that hands out the listen address
// once run prints it.
type syncBuffer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	addr chan string
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{addr: make(chan string, 1)} }

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	for line := range strings.Lines(b.buf.String()) {
		if a, ok := strings.CutPrefix(strings.TrimSpace(line), "fakepay listening on "); ok {
			select {
			case b.addr <- a:
			default:
			}
		}
	}
	return len(p), nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// serve runs the command until the test ends and returns its base URL.
func serve(t *testing.T, args ...string) (string, *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := newSyncBuffer(), newSyncBuffer()
	done := make(chan error, 1)
	go func() { done <- run(ctx, append([]string{"-listen", "127.0.0.1:0"}, args...), stdout, stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("run did not return after the shutdown")
		}
		http.DefaultClient.CloseIdleConnections()
		if strings.Contains(stdout.String()+stderr.String(), testSecret) {
			t.Errorf("the secret was printed:\n%s%s", stdout, stderr)
		}
	})
	select {
	case addr := <-stdout.addr:
		return "http://" + addr, stderr
	case err := <-done:
		t.Fatalf("run: %v\n%s", err, stderr)
	case <-time.After(10 * time.Second):
		t.Fatalf("no listen address:\n%s", stderr)
	}
	return "", nil
}

func request(t *testing.T, method, url, key, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func stats(t *testing.T, base string) fakepay.Stats {
	t.Helper()
	code, b := request(t, "GET", base+"/stats", "", "")
	var st fakepay.Stats
	if err := json.Unmarshal(b, &st); code != http.StatusOK || err != nil {
		t.Fatalf("stats: %d %s %v", code, b, err)
	}
	return st
}

func TestServeChargeAndRestart(t *testing.T) {
	data := filepath.Join(t.TempDir(), "fakepay.jsonl")
	t.Run("first", func(t *testing.T) {
		base, _ := serve(t, "-data", data)
		if code, _ := request(t, "GET", base+"/healthz", "", ""); code != http.StatusOK {
			t.Fatalf("healthz: %d", code)
		}
		code, b := request(t, "POST", base+"/charges", "o1:pay", `{"order_id":"o1","amount_cents":1999}`)
		if code != http.StatusOK || !strings.Contains(string(b), `"status":"SUCCEEDED"`) {
			t.Fatalf("charge: %d %s", code, b)
		}
		if st := stats(t, base); st.Charges != 1 || st.Requests != 1 {
			t.Fatalf("stats %+v", st)
		}
	})
	t.Run("restarted", func(t *testing.T) {
		base, _ := serve(t, "-data", data)
		code, b := request(t, "POST", base+"/charges", "o1:pay", `{"order_id":"o1","amount_cents":1999}`)
		if code != http.StatusOK || !strings.Contains(string(b), `"provider_ref":"ch_1"`) {
			t.Fatalf("replay: %d %s", code, b)
		}
		if st := stats(t, base); st.Charges != 1 || st.ByKey["o1:pay"].Received != 1 {
			t.Fatalf("stats %+v", st)
		}
	})
}

func TestServeSendsSignedCallbacks(t *testing.T) {
	got := make(chan string, 1)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := payment.VerifyCallback([]byte(testSecret), r.Header.Get(payment.SignatureHeader), body, time.Now(), time.Minute); err != nil {
			t.Errorf("callback: %v", err)
		}
		select {
		case got <- string(body):
		default:
		}
	}))
	defer recv.Close()
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte(testSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(secretFileEnv, secretFile)
	base, _ := serve(t, "-callback-url", recv.URL)
	if code, b := request(t, "POST", base+"/charges", "o1:pay", `{"order_id":"o1","amount_cents":5}`); code != http.StatusOK {
		t.Fatalf("charge: %d %s", code, b)
	}
	select {
	case body := <-got:
		if !strings.Contains(body, `"payment_request_id":"o1:pay"`) {
			t.Fatalf("callback %s", body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no callback")
	}
}

func TestHelpDoesNotPrintTheSecret(t *testing.T) {
	t.Setenv(secretEnv, testSecret)
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"-h"}, &stdout, &stderr)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	out := stdout.String() + stderr.String() + err.Error()
	if strings.Contains(out, testSecret) {
		t.Fatalf("-h printed the secret:\n%s", out)
	}
	for _, want := range []string{secretEnv, secretFileEnv, "-listen", "-data", "-callback-url"} {
		if !strings.Contains(out, want) {
			t.Fatalf("-h does not mention %s:\n%s", want, out)
		}
	}
}

func TestBadConfigIsRefused(t *testing.T) {
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte(testSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		env     map[string]string
		args    []string
		mention string
	}{
		"both secrets":       {map[string]string{secretEnv: testSecret, secretFileEnv: secretFile}, nil, secretFileEnv},
		"missing file":       {map[string]string{secretFileEnv: filepath.Join(t.TempDir(), "nope")}, nil, secretFileEnv},
		"callback no secret": {map[string]string{secretEnv: ""}, []string{"-callback-url", "http://127.0.0.1:1/cb"}, secretEnv},
		"bad callback URL":   {map[string]string{secretEnv: testSecret}, []string{"-callback-url", "ftp://127.0.0.1/cb"}, "callback URL"},
		"bad listen":         {nil, []string{"-listen", "8090"}, "-listen"},
		"unknown flag":       {map[string]string{secretEnv: testSecret}, []string{"-secret", testSecret}, "secret"},
		"extra argument":     {nil, []string{"serve"}, "unexpected"},
		"bad data dir":       {nil, []string{"-data", filepath.Join(t.TempDir(), "no", "such", "file")}, "data file"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), append([]string{"-listen", "127.0.0.1:0"}, c.args...), &stdout, &stderr)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), c.mention) {
				t.Fatalf("error %q does not mention %s", err, c.mention)
			}
			if strings.Contains(stdout.String()+stderr.String()+err.Error(), testSecret) {
				t.Fatalf("printed the secret: %v\n%s%s", err, stdout.String(), stderr.String())
			}
		})
	}
}
