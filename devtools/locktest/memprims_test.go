package locktest_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/quorumlock/quorumlock/lease"
)

// The primitives of memory, the suite's reference backend.

type memSem struct {
	holders []*memLease // by permit; nil when free
}

type semHandle struct {
	l       *memLocker
	name    string
	permits int
}

func (l *memLocker) Semaphore(name string, permits int) (lease.Semaphore, error) {
	if permits < 1 {
		return nil, fmt.Errorf("memory: %d permits", permits)
	}
	return &semHandle{l: l, name: name, permits: permits}, nil
}

func (h *semHandle) Name() string { return h.name }
func (h *semHandle) Permits() int { return h.permits }

// try takes a free permit; h.l.m.mu is held.
func (h *semHandle) try() (lease.Lease, error) {
	m := h.l.m
	s := m.sems[h.name]
	if s != nil && len(s.holders) != h.permits {
		for _, le := range s.holders {
			if le != nil {
				return nil, lease.ErrPermitsMismatch
			}
		}
	}
	if s == nil || len(s.holders) != h.permits {
		s = &memSem{holders: make([]*memLease, h.permits)}
		m.sems[h.name] = s
	}
	for i, le := range s.holders {
		if le == nil {
			s.holders[i] = m.grant(fmt.Sprintf("%s/permit/%d", h.name, i), true, func() { s.holders[i] = nil })
			return s.holders[i], nil
		}
	}
	return nil, lease.ErrNotAcquired
}

func (h *semHandle) TryAcquire(context.Context) (lease.Lease, error) {
	h.l.m.mu.Lock()
	defer h.l.m.mu.Unlock()
	return h.try()
}

func (h *semHandle) Acquire(ctx context.Context) (lease.Lease, error) {
	var got lease.Lease
	err := h.l.m.wait(ctx, h.l.maxWait, func() (bool, error) {
		le, err := h.try()
		if errors.Is(err, lease.ErrNotAcquired) {
			return false, nil
		}
		got = le
		return true, err
	})
	return got, err
}

func (h *semHandle) Do(ctx context.Context, fn func(context.Context, lease.Lease) error) error {
	return do(ctx, h.Acquire, fn)
}

type memRW struct {
	readers, waiting int
	writer           bool
}

type rwHandle struct {
	l    *memLocker
	name string
}

func (l *memLocker) RWLock(name string) (lease.RWLock, error) {
	return &rwHandle{l: l, name: name}, nil
}

func (h *rwHandle) Name() string { return h.name }

func (h *rwHandle) state() *memRW {
	if h.l.m.rws[h.name] == nil {
		h.l.m.rws[h.name] = &memRW{}
	}
	return h.l.m.rws[h.name]
}

// tryRead and tryWrite take the lock; h.l.m.mu is held.
func (h *rwHandle) tryRead() (lease.Lease, error) {
	s := h.state()
	if s.writer || s.waiting > 0 {
		return nil, lease.ErrNotAcquired
	}
	s.readers++
	return h.l.m.grant(h.name, false, func() { s.readers-- }), nil
}

func (h *rwHandle) tryWrite() (lease.Lease, error) {
	s := h.state()
	if s.writer || s.readers > 0 {
		return nil, lease.ErrNotAcquired
	}
	s.writer = true
	return h.l.m.grant(h.name, true, func() { s.writer = false }), nil
}

func (h *rwHandle) TryRLock(context.Context) (lease.Lease, error) {
	h.l.m.mu.Lock()
	defer h.l.m.mu.Unlock()
	return h.tryRead()
}

func (h *rwHandle) TryLock(context.Context) (lease.Lease, error) {
	h.l.m.mu.Lock()
	defer h.l.m.mu.Unlock()
	return h.tryWrite()
}

// waitFor calls try until it grants a lease.
func (h *rwHandle) waitFor(ctx context.Context, try func() (lease.Lease, error)) (lease.Lease, error) {
	var got lease.Lease
	err := h.l.m.wait(ctx, h.l.maxWait, func() (bool, error) {
		le, err := try()
		got = le
		return err == nil, nil
	})
	return got, err
}

func (h *rwHandle) RLock(ctx context.Context) (lease.Lease, error) { return h.waitFor(ctx, h.tryRead) }

func (h *rwHandle) Lock(ctx context.Context) (lease.Lease, error) {
	h.l.m.mu.Lock()
	h.state().waiting++
	h.l.m.mu.Unlock()
	defer func() {
		h.l.m.mu.Lock()
		h.state().waiting--
		h.l.m.broadcast()
		h.l.m.mu.Unlock()
	}()
	return h.waitFor(ctx, h.tryWrite)
}

func (h *rwHandle) RDo(ctx context.Context, fn func(context.Context, lease.Lease) error) error {
	return do(ctx, h.RLock, fn)
}

func (h *rwHandle) Do(ctx context.Context, fn func(context.Context, lease.Lease) error) error {
	return do(ctx, h.Lock, fn)
}
