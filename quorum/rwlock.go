package quorum

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quorumlock/quorumlock/lease"
)

// RWLock admits many readers or one writer. A reader holds one of the
// lock's read permits (WithMaxReaders of them: a semaphore named
// name+":read" whose permits carry no fence); the writer holds, in one
// multi-key lease, the key name and every read permit, so on every node
// that votes for it no reader holds a permit, and a reader's majority and
// the writer's cannot both exist. The write lease's Key is name, and its
// Fence (FenceOf(name)) is the only fence it takes.
//
// Writer preference: a writer that waits first holds the key
// name+":writer-waiting" (kept alive while it waits); a reader looks before
// it votes, and waits while a majority has that key, so new readers stop
// and the held read permits drain. Writers queue on that key too, so the
// next writer announces itself while the current one writes. A reader's
// lease expires on its own (its TTL) when the reader dies.
type RWLock struct {
	l       *Locker
	name    string
	readers *Semaphore
	intent  target // the waiting writer's key
	writer  target // name and every read permit
}

var _ lease.RWLock = (*RWLock)(nil)

// RWLock returns the read-write lock name. The dynamic type is *RWLock.
func (l *Locker) RWLock(name string) (lease.RWLock, error) {
	if name == "" {
		return nil, errors.New("quorum: read-write lock: empty name")
	}
	intent := name + ":writer-waiting"
	rs, err := l.semaphore(name+":read", l.cfg.readers, fenceNone, intent)
	if err != nil {
		return nil, err
	}
	rw := &RWLock{l: l, name: name, readers: rs}
	if rw.intent, err = newTarget([]string{intent}); err != nil {
		return nil, err
	}
	rw.intent.fence = fenceNone
	if rw.writer, err = newTarget(append([]string{name}, rs.all.keys...)); err != nil {
		return nil, err
	}
	rw.writer.fence = fenceFirst // keys[0] is name: every read permit's key extends it
	return rw, nil
}

// Name returns the lock's name.
func (rw *RWLock) Name() string { return rw.name }

// RLock takes a read lease, waiting as Lock does while a writer holds the
// lock or waits for it. The lease is a *Lease on a read permit, with no fence.
func (rw *RWLock) RLock(ctx context.Context) (lease.Lease, error) {
	return held(rw.readers.acquire(ctx, rw.l.cfg.retry.Attempts, rw.l.cfg.maxWait))
}

// TryRLock makes one attempt at a read lease: lease.ErrNotAcquired while a
// writer holds the lock or waits for it, or every read permit is held.
func (rw *RWLock) TryRLock(ctx context.Context) (lease.Lease, error) {
	return held(rw.readers.acquire(ctx, 1, 0))
}

// Lock takes the write lease, waiting as Lock does while readers or
// another writer hold it; new readers wait meanwhile. The lease is a
// *Lease whose Key is the lock's name.
func (rw *RWLock) Lock(ctx context.Context) (lease.Lease, error) {
	return held(rw.lock(ctx, rw.l.cfg.retry.Attempts, rw.l.cfg.maxWait))
}

// TryLock makes one attempt at the write lease (it does not stop readers).
func (rw *RWLock) TryLock(ctx context.Context) (lease.Lease, error) {
	return held(rw.lock(ctx, 1, 0))
}

// RDo runs fn under a read lease kept alive, with the guarantees of Locker.Do.
func (rw *RWLock) RDo(ctx context.Context, fn func(ctx context.Context, l lease.Lease) error) error {
	if fn == nil {
		return fmt.Errorf("quorum: read-write lock %q: RDo: fn is nil", rw.name)
	}
	le, err := rw.readers.acquire(ctx, rw.l.cfg.retry.Attempts, rw.l.cfg.maxWait)
	if err != nil {
		return err
	}
	return rw.l.run(ctx, le, fn)
}

// Do runs fn under the write lease kept alive, with the guarantees of Locker.Do.
func (rw *RWLock) Do(ctx context.Context, fn func(ctx context.Context, l lease.Lease) error) error {
	if fn == nil {
		return fmt.Errorf("quorum: read-write lock %q: Do: fn is nil", rw.name)
	}
	le, err := rw.lock(ctx, rw.l.cfg.retry.Attempts, rw.l.cfg.maxWait)
	if err != nil {
		return err
	}
	return rw.l.run(ctx, le, fn)
}

// lock takes the write lease. A waiting writer first takes the intent key,
// behind other writers, and keeps it alive until it holds the lock or
// gives up; the wait for the intent counts against maxWait.
func (rw *RWLock) lock(ctx context.Context, attempts int, maxWait time.Duration) (*Lease, error) {
	if err := rw.readers.check(ctx); err != nil { // the writer must cover every read permit
		return nil, err
	}
	if attempts == 1 {
		return rw.l.acquire(ctx, &acquirer{l: rw.l, tg: rw.writer, attempts: 1}, 0)
	}
	start := time.Now()
	in, err := rw.l.acquire(ctx, &acquirer{l: rw.l, tg: rw.intent, attempts: attempts}, maxWait)
	if err != nil {
		return nil, err
	}
	left := time.Duration(0)
	if maxWait > 0 {
		if left = maxWait - time.Since(start); left <= 0 {
			left = time.Nanosecond // one attempt at least: the intent was granted
		}
	}
	var le *Lease
	err = rw.l.run(ctx, in, func(ctx context.Context, _ lease.Lease) error {
		var err error
		le, err = rw.l.acquire(ctx, &acquirer{l: rw.l, tg: rw.writer, attempts: attempts}, left)
		return err
	})
	if le != nil && errors.Is(err, lease.ErrLeaseLost) {
		err = nil // the intent was lost; the write lease was not
	}
	return le, err
}
