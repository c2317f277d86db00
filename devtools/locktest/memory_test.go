package locktest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/devtools/locktest"
	"github.com/quorumlock/quorumlock/lease"
)

// TestRunPrimitivesOnMemory runs the primitives' cases on memory, an
// in-process reference of the lease.Primitives contract: the cases must
// be passable, and they are checked before any backend runs them.
func TestRunPrimitivesOnMemory(t *testing.T) {
	m := &memory{changed: make(chan struct{}), fences: map[string]int64{}, sems: map[string]*memSem{},
		rws: map[string]*memRW{}, elections: map[string]*memElection{}}
	locktest.RunPrimitives(t, locktest.Backend{
		TTL: time.Second,
		New: func(_ *testing.T, _, maxWait time.Duration) lease.Locker { return &memLocker{m: m, maxWait: maxWait} },
	})
}

// memory is the shared state of every memLocker: what the servers would
// keep. Every change closes changed, waking the waiters.
type memory struct {
	mu        sync.Mutex
	changed   chan struct{}
	fences    map[string]int64
	sems      map[string]*memSem
	rws       map[string]*memRW
	elections map[string]*memElection
}

// broadcast wakes every waiter; m.mu is held.
func (m *memory) broadcast() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// wait calls try under m.mu until it reports done, waking on every change,
// until ctx ends or maxWait passes (then lease.ErrNotAcquired).
func (m *memory) wait(ctx context.Context, maxWait time.Duration, try func() (done bool, err error)) error {
	limit := time.NewTimer(maxWait)
	defer limit.Stop()
	for {
		m.mu.Lock()
		done, err := try()
		changed := m.changed
		m.mu.Unlock()
		if done || err != nil {
			return err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-limit.C:
			return lease.ErrNotAcquired
		}
	}
}

// grant makes a lease on key with the key's next fence (fenced) that calls
// release, under m.mu, when it ends; m.mu is held.
func (m *memory) grant(key string, fenced bool, release func()) *memLease {
	le := &memLease{m: m, key: key, lost: make(chan struct{}), release: release}
	if fenced {
		m.fences[key]++
		le.fence = m.fences[key]
	}
	return le
}

type memLease struct {
	m       *memory
	key     string
	fence   int64
	lost    chan struct{}
	once    sync.Once
	release func()
	err     error
}

func (l *memLease) Key() string           { return l.key }
func (l *memLease) Keys() []string        { return []string{l.key} }
func (l *memLease) Token() string         { return fmt.Sprintf("%p", l) }
func (l *memLease) Fence() int64          { return l.fence }
func (l *memLease) Until() time.Time      { return time.Now().Add(time.Hour) }
func (l *memLease) Lost() <-chan struct{} { return l.lost }
func (l *memLease) FenceOf(key string) int64 {
	if key == l.key {
		return l.fence
	}
	return 0
}

func (l *memLease) Err() error {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	return l.err
}

func (l *memLease) Extend(context.Context, time.Duration) error { return l.Err() }

func (l *memLease) Unlock(context.Context) error {
	l.end(lease.ErrReleased)
	return nil
}

// end ends the lease once, with err.
func (l *memLease) end(err error) {
	l.once.Do(func() {
		l.m.mu.Lock()
		defer l.m.mu.Unlock()
		l.err = err
		l.release()
		close(l.lost)
		l.m.broadcast()
	})
}

var errMemMutex = errors.New("memory: the mutex is not implemented")

// memLocker is one Locker on memory: only its primitives work.
type memLocker struct {
	m       *memory
	maxWait time.Duration
}

func (*memLocker) Lock(context.Context, string) (lease.Lease, error)    { return nil, errMemMutex }
func (*memLocker) TryLock(context.Context, string) (lease.Lease, error) { return nil, errMemMutex }
func (*memLocker) LockMulti(context.Context, ...string) (lease.Lease, error) {
	return nil, errMemMutex
}
func (*memLocker) TryLockMulti(context.Context, ...string) (lease.Lease, error) {
	return nil, errMemMutex
}
func (*memLocker) Do(context.Context, string, func(context.Context, lease.Lease) error) error {
	return errMemMutex
}
func (*memLocker) DoMulti(context.Context, []string, func(context.Context, lease.Lease) error) error {
	return errMemMutex
}
func (*memLocker) Close() error { return nil }

// do runs fn under a lease taken by acquire, like Locker.Do without the
// keepalive.
func do(ctx context.Context, acquire func(context.Context) (lease.Lease, error), fn func(context.Context, lease.Lease) error) error {
	le, err := acquire(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = le.Unlock(ctx) }()
	return fn(ctx, le)
}
