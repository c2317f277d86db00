package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quorumlock/quorumlock/lease"
)

var _ lease.Lease = (*Lease)(nil)

// Lease is a held lock on one key or more: the right to act on them while
// its session is kept alive. Its methods are safe for concurrent use.
type Lease struct {
	l      *Locker
	s      *session
	name   string    // the keys joined by ",", or the primitive's name
	keys   []string  // sorted
	owned  []claimed // the etcd key held for each key
	fences []int64
	start  time.Time

	unlockMu sync.Mutex
	mu       sync.Mutex
	err      error // why it ended, nil while held
	lost     chan struct{}
}

// Key returns the locked key (of a multi-key lease, the first in order).
func (le *Lease) Key() string { return le.keys[0] }

// Keys returns the locked keys, sorted.
func (le *Lease) Keys() []string { return slices.Clone(le.keys) }

// Token returns the etcd key the lease holds for its first key: for a
// lock the recipe's owner key, prefix + key + "/" + the session's lease
// id; for the primitives, see Locker.Semaphore, Locker.RWLock and
// Locker.Election.
func (le *Lease) Token() string { return le.owned[0].owner }

// Fence returns the fence of Key (see FenceOf).
func (le *Lease) Fence() int64 { return le.fences[0] }

// FenceOf returns the fence of key, one of the lease's keys (0 for any
// other): the etcd revision at which the lease became its owner, or the
// Fencer's token with WithFencer.
func (le *Lease) FenceOf(key string) int64 {
	if i, ok := slices.BinarySearch(le.keys, key); ok {
		return le.fences[i]
	}
	return 0
}

// Until returns the end of the lease's validity as the client sees it (see
// the package documentation). It carries a monotonic clock reading.
func (le *Lease) Until() time.Time {
	u, _ := le.s.validity()
	return u
}

// Lost returns a channel that is closed when the lease ends: its session
// ended (the etcd lease expired, was revoked, or no keep-alive was answered
// within the validity), or Unlock was called. Err tells which.
func (le *Lease) Lost() <-chan struct{} { return le.lost }

// Err returns nil while the lease is held, then an error matching
// lease.ErrLeaseLost when it was lost, or lease.ErrReleased when Unlock
// released it.
func (le *Lease) Err() error {
	le.mu.Lock()
	defer le.mu.Unlock()
	return le.err
}

// lose ends the lease with err when its session ended (reason 0: the
// Locker closed): its etcd keys went with the session, so its keys'
// turns in this Locker are given back.
func (le *Lease) lose(err error, reason lease.LostReason) {
	if !le.end(err) {
		return
	}
	le.leaveAll()
	if reason != 0 {
		le.l.cfg.observer.ObserveLost(lease.LostEvent{Key: le.name, Reason: reason, Held: time.Since(le.start)})
	}
}

// leaveAll gives back the turns the lease's keys hold in the Locker.
func (le *Lease) leaveAll() {
	for _, h := range le.owned {
		le.l.leave(h)
	}
}

// end moves a held lease to err and closes Lost; false when it had ended.
func (le *Lease) end(err error) bool {
	le.mu.Lock()
	defer le.mu.Unlock()
	if le.err != nil {
		return false
	}
	le.err = err
	close(le.lost)
	return true
}

// Extend refreshes the session's etcd lease now (a keep-alive, on top of
// the client's own every TTL/3), moving Until to the refresh plus the TTL.
// etcd leases keep the TTL they were granted: ttl must be the Locker's.
// It fails with an error matching lease.ErrLeaseLost when the lease has
// ended or etcd no longer knows its session, and lease.ErrExtendUnconfirmed
// when etcd did not answer in time.
func (le *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if ttl != le.l.cfg.ttl {
		return fmt.Errorf("etcdlock: extend %q: TTL %v: an etcd lease keeps its TTL, %v", le.name, ttl, le.l.cfg.ttl)
	}
	if err := le.Err(); err != nil {
		return fmt.Errorf("etcdlock: extend %q: %w: %w", le.name, lease.ErrLeaseLost, err)
	}
	start := time.Now()
	kctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), le.l.cfg.nodeTimeout)
	_, err := le.l.cli.KeepAliveOnce(kctx, le.s.cs.Lease())
	cancel()
	ev := lease.ExtendEvent{Key: le.name, Duration: time.Since(start)}
	switch {
	case err == nil:
		le.s.refreshed(start)
		ev.Confirmed = 1
	case isLeaseGone(err):
		ev.Err = fmt.Errorf("etcdlock: extend %q: %w: %w", le.name, lease.ErrLeaseLost, err)
		le.s.end(ev.Err, lease.LostExtendFailed)
	default:
		ev.Err = fmt.Errorf("etcdlock: extend %q: %w: %w", le.name, lease.ErrExtendUnconfirmed, err)
	}
	le.l.cfg.observer.ObserveExtend(ev)
	return ev.Err
}

// Unlock releases the lease: the etcd key of every key is deleted, so
// the next waiter of each is woken. The lease ends (Lost is closed)
// whatever the outcome. It returns an error matching lease.ErrLeaseLost
// when the session had ended before (its keys went with the etcd lease),
// or lease.ErrUnlockUnconfirmed when etcd did not confirm a delete in
// time: the Locker then retries it in the background until the session
// ends, which takes the key with it.
func (le *Lease) Unlock(ctx context.Context) error {
	le.unlockMu.Lock()
	defer le.unlockMu.Unlock()
	start := time.Now()
	released := fmt.Errorf("etcdlock: %q: %w", le.name, lease.ErrReleased)
	if !le.end(released) {
		if err := le.Err(); !errors.Is(err, lease.ErrReleased) {
			return fmt.Errorf("etcdlock: unlock %q: %w", le.name, err)
		}
		return nil // released already
	}
	le.s.drop(le)
	if !le.s.live() {
		le.leaveAll()
		return fmt.Errorf("etcdlock: unlock %q: %w: its session ended first", le.name, lease.ErrLeaseLost)
	}
	var failed []error
	for i := len(le.owned) - 1; i >= 0; i-- {
		if err := le.l.release(ctx, le.owned[i]); err != nil {
			failed = append(failed, err)
		}
	}
	ev := lease.ReleaseEvent{Key: le.name, Duration: time.Since(start), Released: len(le.owned) - len(failed), Failed: len(failed)}
	le.l.cfg.observer.ObserveRelease(ev)
	if len(failed) > 0 {
		return fmt.Errorf("etcdlock: unlock %q: %w: %w", le.name, lease.ErrUnlockUnconfirmed, errors.Join(failed...))
	}
	return nil
}

// String describes the lease for humans: its keys and first fence.
func (le *Lease) String() string {
	return fmt.Sprintf("etcd lease %s fence %d", strings.Join(le.keys, ","), le.fences[0])
}
