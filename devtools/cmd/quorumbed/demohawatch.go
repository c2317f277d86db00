package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/devtools/testbed"
)

// readySample is one answer of /readyz: when it came, its status and its
// body (status 0: no answer, and the body is the error).
type readySample struct {
	at     time.Time
	status int
	body   string
}

// readyz asks ordersd1's /readyz, within 3 s (its own checks take 2 s at
// most).
func (s *haStory) readyz(ctx context.Context) readySample {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	r := send(ctx, http.MethodGet, s.procs[0].url+"/readyz", "")
	if r.err != nil {
		return readySample{at: time.Now(), body: r.err.Error()}
	}
	return readySample{at: time.Now(), status: r.status, body: strings.TrimSpace(r.body)}
}

// primaryIn is the address of the host that /readyz's body names as the
// primary ("postgres primary: host N of M in ORDERS_DATABASE_URL"), or ""
// when it names none.
func (s *haStory) primaryIn(body string) string {
	_, rest, ok := strings.Cut(body, "postgres primary: host ")
	if !ok {
		return ""
	}
	num, _, _ := strings.Cut(rest, " ")
	i, err := strconv.Atoi(num)
	if err != nil || i < 1 || i > len(s.hosts) {
		return ""
	}
	return s.hosts[i-1]
}

// readyLine is /readyz's body on one line, with the node it names as the
// primary.
func (s *haStory) readyLine(body string) string {
	line := strings.ReplaceAll(body, "\n", " / ")
	if addr := s.primaryIn(body); addr != "" {
		line += fmt.Sprintf(" (%s at %s)", s.nodeAt(addr), addr)
	}
	return line
}

// watchFailover waits, from the fault on, until the monitor has promoted
// a new primary and /readyz on ordersd1 names it, within haFailoverLimit.
// It returns the new primary and every change of /readyz's answer.
func (s *haStory) watchFailover(ctx context.Context, f *haFailover, victim *testbed.PostgresHANode) (*testbed.PostgresHANode, []readySample, error) {
	wctx, cancel := context.WithDeadline(ctx, f.fault.Add(haFailoverLimit))
	defer cancel()
	var primary *testbed.PostgresHANode
	var perr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		primary, perr = waitNewPrimary(wctx, s.g, victim)
	}()
	ready, rerr := s.watchReadyz(wctx, victim.Addr())
	<-done
	if perr != nil {
		ev, _ := s.g.Events(context.WithoutCancel(ctx), 10)
		perr = fmt.Errorf("the monitor promoted no standby within %v of the kill: %w; its last events: %v", haFailoverLimit, perr, ev)
	}
	for _, r := range ready {
		if r.status != http.StatusOK && f.notReady.IsZero() {
			f.notReady = r.at
		}
	}
	if rerr == nil && primary != nil {
		last := ready[len(ready)-1]
		if named := s.primaryIn(last.body); named != primary.Addr() {
			rerr = fmt.Errorf("/readyz names %s the primary, the monitor %s", s.nodeAt(named), primary.Name())
		} else {
			f.readyNamed = last.at
		}
	}
	return primary, ready, errors.Join(perr, rerr)
}

// waitNewPrimary waits until the monitor reports a primary other than
// victim, polling it every 100 ms until ctx ends.
func waitNewPrimary(ctx context.Context, g *testbed.PostgresGroup, victim *testbed.PostgresHANode) (*testbed.PostgresHANode, error) {
	for {
		p, err := g.Primary(ctx)
		if err == nil && p != victim {
			return p, nil
		}
		if err == nil {
			err = fmt.Errorf("%s is still the primary", victim.Name())
		}
		if serr := sleepCtx(ctx, 100*time.Millisecond); serr != nil {
			return nil, fmt.Errorf("%w (last: %w)", serr, err)
		}
	}
}

// watchReadyz asks ordersd1's /readyz every 100 ms until it is ready and
// names a primary other than the one at victim, and returns each answer
// that differed from the one before. It fails when ctx ends first.
func (s *haStory) watchReadyz(ctx context.Context, victim string) ([]readySample, error) {
	var out []readySample
	for {
		r := s.readyz(ctx)
		if n := len(out); n == 0 || out[n-1].status != r.status || out[n-1].body != r.body {
			out = append(out, r)
		}
		if named := s.primaryIn(r.body); r.status == http.StatusOK && named != "" && named != victim {
			return out, nil
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return out, fmt.Errorf("/readyz on ordersd1 named no new primary within %v of the kill: %w (last: %d %s)",
				haFailoverLimit, err, r.status, r.body)
		}
	}
}

// printEvents prints the monitor's events since the fault and finds the
// new primary's promotion among them: the monitor's decision, the first
// event that assigns it a primary's state.
func (s *haStory) printEvents(ctx context.Context, f *haFailover) error {
	ev, err := s.g.Events(ctx, 50)
	if err != nil {
		return err
	}
	fmt.Fprintln(s.out, "\nthe monitor's events since the kill (node reported/assigned state: what it logged):")
	for _, e := range ev {
		if e.Time.Before(f.fault) {
			continue
		}
		fmt.Fprintf(s.out, "  +%-8v %s %s/%s: %s\n", e.Time.Sub(f.fault).Round(time.Millisecond), e.Node, e.Reported, e.Assigned, e.Description)
		if f.promoted.IsZero() && e.Node == f.primary && (e.Assigned == "wait_primary" || e.Assigned == "primary") {
			f.promoted = e.Time
		}
	}
	if f.promoted.IsZero() {
		return fmt.Errorf("the monitor's events since the kill show no promotion of %s", f.primary)
	}
	return nil
}

// printReady prints each change of /readyz's answer after the fault.
func (s *haStory) printReady(f *haFailover, ready []readySample) {
	fmt.Fprintln(s.out, "\n/readyz on ordersd1 after the kill, each change:")
	for _, r := range ready {
		fmt.Fprintf(s.out, "  +%-8v %d %s\n", r.at.Sub(f.fault).Round(time.Millisecond), r.status, s.readyLine(r.body))
	}
}
