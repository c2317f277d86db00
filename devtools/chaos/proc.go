package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Launcher says how to start a worker process: Path and Args run a binary
// that calls [MaybeWorker] at start (devtools/cmd/chaos, or a test binary whose
// TestMain does). The worker's configuration travels in [EnvWorker].
type Launcher struct {
	Path string
	Args []string
}

// proc is one worker process.
type proc struct {
	id   int
	cmd  *exec.Cmd
	ctl  io.WriteCloser // the worker's standard input
	done chan struct{}
	err  error // the exit error, after done

	stderrMu sync.Mutex
	stderr   strings.Builder
}

// history collects the events of every worker of a run, and wakes waiters
// when one arrives.
type history struct {
	mu      sync.Mutex
	events  []Event
	changed chan struct{}
}

func newHistory() *history { return &history{changed: make(chan struct{})} }

func (h *history) add(e Event) {
	h.mu.Lock()
	h.events = append(h.events, e)
	close(h.changed)
	h.changed = make(chan struct{})
	h.mu.Unlock()
}

// all returns a copy of every event so far.
func (h *history) all() []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Event(nil), h.events...)
}

// waitFor returns the first event from index from on that matches, waiting
// until one arrives or ctx ends or d has passed.
func (h *history) waitFor(ctx context.Context, from int, d time.Duration, match func(Event) bool) (Event, int, bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		h.mu.Lock()
		for i := from; i < len(h.events); i++ {
			if match(h.events[i]) {
				e := h.events[i]
				h.mu.Unlock()
				return e, i, true
			}
		}
		from = len(h.events)
		ch := h.changed
		h.mu.Unlock()
		select {
		case <-ch:
		case <-t.C:
			return Event{}, from, false
		case <-ctx.Done():
			return Event{}, from, false
		}
	}
}

// len is the number of events so far.
func (h *history) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.events)
}

// start launches a worker process with cfg; its events go to h.
func (l Launcher) start(cfg WorkerConfig, h *history) (*proc, error) {
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(l.Path, l.Args...)
	cmd.Env = append(os.Environ(), EnvWorker+"="+string(raw))
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	ctl, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	p := &proc{id: cfg.ID, cmd: cmd, ctl: ctl, done: make(chan struct{})}
	cmd.Stderr = &lockedWriter{p: p}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker %d: %w", cfg.ID, err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var e Event
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				h.add(e)
			}
		}
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

type lockedWriter struct{ p *proc }

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.p.stderrMu.Lock()
	defer w.p.stderrMu.Unlock()
	if w.p.stderr.Len() < 64<<10 {
		w.p.stderr.Write(b)
	}
	return len(b), nil
}

func (p *proc) signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return fmt.Errorf("worker %d has exited", p.id)
	default:
	}
	return p.cmd.Process.Signal(sig)
}

// gate holds the worker before its next lock call (closed) or lets it go
// on (open).
func (p *proc) gate(closed bool) error {
	line := ctlOpen
	if closed {
		line = ctlGate
	}
	_, err := io.WriteString(p.ctl, line+"\n")
	return err
}

// pause freezes the worker wherever it is (SIGSTOP).
func (p *proc) pause() error { return p.signal(syscall.SIGSTOP) }

// resume thaws a paused worker.
func (p *proc) resume() error { return p.signal(syscall.SIGCONT) }

// kill crashes the worker (SIGKILL) and waits until it has exited, and
// checks that the signal is what ended it.
func (p *proc) kill(ctx context.Context) error {
	if err := p.signal(syscall.SIGKILL); err != nil {
		return err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return nil
		}
	}
	return fmt.Errorf("worker %d: killed, but it ended with %v", p.id, p.err)
}

// stop asks the worker to finish (SIGCONT then SIGTERM) and waits up to
// grace before it SIGKILLs it. It returns the worker's exit error, if any.
func (p *proc) stop(grace time.Duration) error {
	_ = p.signal(syscall.SIGCONT)
	_ = p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.signal(syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("worker %d did not stop within %v", p.id, grace)
	}
	return p.err
}

func (p *proc) stderrText() string {
	p.stderrMu.Lock()
	defer p.stderrMu.Unlock()
	return p.stderr.String()
}
