package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"syscall"
	"time"

	"github.com/quorumlock/quorumlock/internal/syncbuf"
)

// ordersdProc is one ordersd process of the demo.
type ordersdProc struct {
	name string
	url  string
	cmd  *exec.Cmd
	log  *syncbuf.Buffer // its stdout and stderr
	done chan struct{}
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
