package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quorumlock/quorumlock/internal/option"
	"github.com/quorumlock/quorumlock/lease"
)

var (
	_ lease.Locker     = (*Locker)(nil)
	_ lease.Primitives = (*Locker)(nil)
)

// Locker takes locks on etcd. It is safe for concurrent use; Close it when
// done.
type Locker struct {
	cli    *clientv3.Client
	cfg    config
	ctx    context.Context // the sessions' keep-alive; cancelled by Close
	cancel context.CancelFunc
	gates  *gates
	queues *queues       // the semaphores' waiters, oldest first
	seq    atomic.Uint64 // tells apart the read-write locks' keys of a session

	mu      sync.Mutex
	sess    *session
	closed  bool
	work    sync.WaitGroup // background work: listeners, revokes, releases
	working bool           // false once Close waits for work
}

// errInvalid is what a refused option wraps.
var errInvalid = errors.New("etcdlock: invalid option")

// New returns a Locker on the etcd cluster cli talks to. The client stays
// the caller's: close it after the Locker.
func New(cli *clientv3.Client, opts ...Option) (*Locker, error) {
	if cli == nil {
		return nil, errors.New("etcdlock: nil client")
	}
	cfg := defaultConfig()
	if err := option.Apply(&cfg, opts, errInvalid); err != nil {
		return nil, err
	}
	if err := cfg.resolve(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Locker{cli: cli, cfg: cfg, ctx: ctx, cancel: cancel, gates: newGates(), queues: newQueues(), working: true}, nil
}

// TTL returns the sessions' TTL.
func (l *Locker) TTL() time.Duration { return l.cfg.ttl }

// bg runs f in the background, counted in the work Close waits for; after
// Close it does not run f.
func (l *Locker) bg(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.bgLocked(f)
}

// bgLocked is bg with l.mu held, or from the session while it runs.
func (l *Locker) bgLocked(f func()) {
	if l.working {
		l.work.Go(f)
	}
}

// session returns the live session, opening one when there is none.
func (l *Locker) session(ctx context.Context) (*session, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return nil, lease.ErrClosed
	case l.sess != nil && l.sess.live():
		return l.sess, nil
	}
	s, err := openSession(ctx, l.ctx, l.cli, &l.cfg, l.bg)
	if err != nil {
		return nil, err
	}
	l.bgLocked(s.measure)
	l.sess = s
	return s, nil
}

// Close ends the session (its locks are lost, and its etcd lease is
// revoked, which deletes their keys), revokes at once the etcd leases of
// sessions that ended earlier and were waiting for their Until to pass
// (their holders in this process are still inside it: closing the Locker
// gives their keys up), and waits for background work: the
// keep-alive listener, releases retried after an unconfirmed Unlock, and
// the cleanup of Lock calls that gave up, each bounded by etcd answering
// or the client closing.
func (l *Locker) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	s := l.sess
	l.mu.Unlock()
	if s != nil {
		s.end(fmt.Errorf("etcdlock: %w: %w", lease.ErrLeaseLost, lease.ErrClosed), 0)
	}
	l.cancel()
	l.mu.Lock()
	l.working = false
	l.mu.Unlock()
	l.work.Wait()
	return nil
}
