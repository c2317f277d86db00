package locktest_test

import (
	"context"
	"time"

	"github.com/quorumlock/quorumlock/lease"
)

type memElection struct {
	by     *electionHandle // the leading candidate, or nil
	leader lease.Leader
}

type electionHandle struct {
	l    *memLocker
	name string
	le   *memLease
}

func (l *memLocker) Election(name string) (lease.Election, error) {
	return &electionHandle{l: l, name: name}, nil
}

func (h *electionHandle) Name() string { return h.name }

func (h *electionHandle) state() *memElection {
	if h.l.m.elections[h.name] == nil {
		h.l.m.elections[h.name] = &memElection{}
	}
	return h.l.m.elections[h.name]
}

func (h *electionHandle) Campaign(ctx context.Context, value string) (lease.Lease, error) {
	var got lease.Lease
	err := h.l.m.wait(ctx, 24*time.Hour, func() (bool, error) {
		e := h.state()
		if e.by != nil {
			return false, nil
		}
		h.le = h.l.m.grant(h.name, true, func() { e.by = nil })
		e.by, e.leader = h, lease.Leader{Value: value, Term: h.le.fence}
		got = h.le
		return true, nil
	})
	return got, err
}

func (h *electionHandle) Resign(context.Context) error {
	h.l.m.mu.Lock()
	leads := h.state().by == h
	h.l.m.mu.Unlock()
	if !leads {
		return lease.ErrNotLeader
	}
	h.le.end(lease.ErrReleased)
	return nil
}

func (h *electionHandle) Leader(context.Context) (lease.Leader, error) {
	h.l.m.mu.Lock()
	defer h.l.m.mu.Unlock()
	if e := h.state(); e.by != nil {
		return e.leader, nil
	}
	return lease.Leader{}, lease.ErrNoLeader
}

func (h *electionHandle) Observe(ctx context.Context) <-chan lease.Leader {
	ch := make(chan lease.Leader)
	go func() {
		defer close(ch)
		var last int64
		for {
			h.l.m.mu.Lock()
			e, changed := h.state(), h.l.m.changed
			cur, leads := e.leader, e.by != nil
			h.l.m.mu.Unlock()
			if leads && cur.Term > last {
				select {
				case ch <- cur:
					last = cur.Term
					continue
				case <-ctx.Done():
					return
				}
			}
			select {
			case <-changed:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch
}
