// Command fakepay serves a fake HTTP payment provider for the demo,
// compose and tests (package fakepay). It is idempotent on the
// Idempotency-Key like a real provider, fails on demand, and can keep its
// charges in a data file across restarts.
//
//	fakepay [-listen 127.0.0.1:8090] [-data FILE] [-callback-url URL]
//
// Endpoints:
//
//	POST /charges                 Idempotency-Key: <payment request id>
//	                              {"order_id": "...", "amount_cents": 1999}
//	                              -> 200 {"payment_request_id", "order_id", "amount_cents",
//	                                      "status": SUCCEEDED|FAILED|PENDING, "provider_ref"}
//	                              a repeated key replays the answer (Idempotent-Replayed: true);
//	                              the same key with another body is 422
//	GET  /charges/{key}           -> 200 the charge, or 404
//	POST /charges/{key}/complete  {"status": "SUCCEEDED"|"FAILED"} settles a PENDING charge (409 if not pending)
//	POST /faults                  {"key": "" (any) or a key, "fault": "decline"|"lose_reply"|"drop"|
//	                              "pending"|"duplicate_callback", "count": 1}
//	GET  /stats                   -> {"charges", "requests", "by_key": {...}, "callbacks": {...}}
//	GET  /healthz                 -> 200
//
// With -callback-url, final charges are POSTed there, signed in the
// Fakepay-Signature header with the secret from FAKEPAY_CALLBACK_SECRET or
// the file named by FAKEPAY_CALLBACK_SECRET_FILE (never a flag). Errors are
// application/problem+json. SIGINT or SIGTERM shuts the server down
// gracefully.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/quorumlock/quorumlock/devtools/fakepay"
)

// Secret variables.
const (
	secretEnv     = "FAKEPAY_CALLBACK_SECRET"
	secretFileEnv = "FAKEPAY_CALLBACK_SECRET_FILE"
)

// shutdownWait bounds a graceful shutdown.
const shutdownWait = 10 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakepay:", err)
		os.Exit(1)
	}
}

type config struct {
	listen      string
	dataFile    string
	callbackURL string
	secret      []byte
}

// parseConfig reads the flags and the secret. Usage and flag errors go to
// out.
func parseConfig(args []string, out io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("fakepay", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintln(out, "usage: fakepay [flags]")
		fmt.Fprintf(out, "the callback secret comes from the environment or a file (never a flag): %s or %s\n", secretEnv, secretFileEnv)
		fs.PrintDefaults()
	}
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8090", "HTTP listen address")
	fs.StringVar(&c.dataFile, "data", "", "data file that keeps the charges across restarts (default: memory only)")
	fs.StringVar(&c.callbackURL, "callback-url", "", "URL that receives signed callbacks of final charges (needs the secret)")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if _, _, err := net.SplitHostPort(c.listen); err != nil {
		return config{}, fmt.Errorf("-listen %q: %w", c.listen, err)
	}
	secret, err := callbackSecret()
	if err != nil {
		return config{}, err
	}
	if c.callbackURL != "" && len(secret) == 0 {
		return config{}, fmt.Errorf("-callback-url needs a secret in %s or %s", secretEnv, secretFileEnv)
	}
	c.secret = secret
	return c, nil
}

// callbackSecret reads the secret from its variable or the file its _FILE
// variable names; setting both is an error. Errors never carry the value.
func callbackSecret() ([]byte, error) {
	v, inEnv := os.LookupEnv(secretEnv)
	path, inFile := os.LookupEnv(secretFileEnv)
	switch {
	case inEnv && inFile:
		return nil, fmt.Errorf("%s and %s are both set: set one", secretEnv, secretFileEnv)
	case inFile:
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", secretFileEnv, err)
		}
		s := strings.TrimRight(string(b), "\r\n")
		if s == "" {
			return nil, fmt.Errorf("%s: the file is empty", secretFileEnv)
		}
		return []byte(s), nil
	}
	return []byte(v), nil
}

// run serves until ctx ends. Once it listens it writes
// "fakepay listening on <addr>" to stdout; logs go to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseConfig(args, stderr)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	opts := []fakepay.Option{fakepay.WithLogger(log)}
	if cfg.dataFile != "" {
		opts = append(opts, fakepay.WithDataFile(cfg.dataFile))
	}
	if cfg.callbackURL != "" {
		opts = append(opts, fakepay.WithCallback(cfg.callbackURL, cfg.secret))
	}
	fp, err := fakepay.New(opts...)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return errors.Join(err, fp.Close())
	}
	srv := &http.Server{Handler: fp.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 64 << 10,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	log.Info("fakepay listening", "addr", ln.Addr().String(), "data", cfg.dataFile, "callback_url", redacted(cfg.callbackURL))
	fmt.Fprintf(stdout, "fakepay listening on %s\n", ln.Addr())

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	var serveErr error
	select {
	case serveErr = <-served:
	case <-ctx.Done():
		log.Info("fakepay shutting down")
		sctx, cancel := context.WithTimeout(context.Background(), shutdownWait)
		serveErr = srv.Shutdown(sctx)
		cancel()
		if serveErr != nil {
			_ = srv.Close()
		}
		<-served
	}
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return errors.Join(serveErr, fp.Close())
}

// redacted hides a password in a URL, for logs.
func redacted(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Redacted()
}
