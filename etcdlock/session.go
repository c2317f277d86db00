package etcdlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/quorumlock/quorumlock/internal/wait"
	"github.com/quorumlock/quorumlock/lease"
)

// session is one etcd lease kept alive for a Locker's locks, with the
// client's conservative view of its validity, and the leases it holds.
type session struct {
	cs    *concurrency.Session
	cfg   *config
	bg    func(func())       // runs work the Locker's Close waits for
	keep  context.Context    // the Locker's: ends at Close
	sctx  context.Context    // the keep-alives' context
	stop  context.CancelFunc // ends them
	ended chan struct{}      // closed when the session ends
	timer *time.Timer        // ends the session at until

	mu     sync.Mutex
	until  time.Time
	err    error // why the session ended
	leases map[*Lease]struct{}
}

// openSession grants a lease (within ctx) and keeps it alive until keep
// ends. The caller runs measure.
func openSession(ctx, keep context.Context, cli *clientv3.Client, cfg *config, bg func(func())) (*session, error) {
	start := time.Now()
	gctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), cfg.nodeTimeout)
	g, err := cli.Grant(gctx, int64(cfg.ttl/time.Second))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("etcdlock: open a session: %w: %w", lease.ErrQuorumUnavailable, err)
	}
	sctx, stop := context.WithCancel(keep)
	cs, err := concurrency.NewSession(cli, concurrency.WithLease(g.ID), concurrency.WithContext(sctx))
	if err != nil {
		stop()
		return nil, fmt.Errorf("etcdlock: open a session: %w: %w", lease.ErrQuorumUnavailable, err)
	}
	s := &session{cs: cs, cfg: cfg, bg: bg, keep: keep, sctx: sctx, stop: stop, ended: make(chan struct{}),
		until: start.Add(cfg.ttl - cfg.allowance()), leases: map[*Lease]struct{}{}}
	s.timer = time.AfterFunc(time.Until(s.until), s.expire)
	return s, nil
}

// measure refreshes the lease itself every TTL/3 (beside the session's own
// keep-alive, whose requests' send times the client does not expose), so
// that Until is the send time of the last answered refresh plus the TTL,
// minus the drift allowance. It ends the session when etcd no longer knows
// the lease; the validity timer ends it when no refresh is answered in time.
//
// The client's own keep-alive ending is no loss by itself: the client gives
// a lease up once its last answer is a TTL old (after a pause of the
// process, say), while a later refresh of measure's may still hold it at
// etcd. measure asks etcd at once instead, and goes on refreshing alone.
func (s *session) measure() {
	t := time.NewTicker(s.cfg.ttl / 3)
	defer t.Stop()
	clientKeepAlive := s.cs.Done() // nil once it ended
	for {
		select {
		case <-clientKeepAlive:
			clientKeepAlive = nil
		case <-s.sctx.Done():
			return
		case <-t.C:
		}
		if !s.refresh() {
			return
		}
	}
}

// refresh sends one keep-alive and moves Until on when etcd answers it. It
// ends the session, and returns false, when etcd no longer knows the
// lease; any other failure is left to the next refresh or the validity
// timer.
func (s *session) refresh() bool {
	sent := time.Now()
	ctx, cancel := context.WithTimeout(s.sctx, s.cfg.nodeTimeout)
	_, err := s.cs.Client().KeepAliveOnce(ctx, s.cs.Lease())
	cancel()
	switch {
	case err == nil:
		s.refreshed(sent)
	case isLeaseGone(err):
		s.end(fmt.Errorf("etcdlock: %w: etcd no longer knows the session's lease: %w", lease.ErrLeaseLost, err), lease.LostExtendFailed)
		return false
	}
	return true
}

// moveUntil moves the validity later; s.mu must be held.
func (s *session) moveUntil(u time.Time) {
	if u.After(s.until) && s.err == nil {
		s.until = u
		s.timer.Reset(time.Until(u))
	}
}

// refreshed notes a keep-alive the caller sent at sent and saw answered.
func (s *session) refreshed(sent time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.moveUntil(sent.Add(s.cfg.ttl - s.cfg.allowance()))
}

// expire ends the session when its validity ran out with no keep-alive.
func (s *session) expire() {
	s.mu.Lock()
	late := time.Until(s.until)
	s.mu.Unlock()
	if late > 0 {
		s.timer.Reset(late)
		return
	}
	s.end(fmt.Errorf("etcdlock: %w: validity ran out with no keep-alive answered", lease.ErrLeaseLost), lease.LostExpired)
}

// end ends the session once, and every lease it holds with err.
func (s *session) end(err error, reason lease.LostReason) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = err
	s.timer.Stop()
	leases := s.leases
	s.leases = nil
	s.mu.Unlock()
	close(s.ended)
	s.stop()
	for le := range leases {
		le.lose(err, reason)
	}
	// Its keys go with its etcd lease: revoke it, rather than have the
	// next owners wait for the leader to expire it, once Until has passed.
	s.bg(s.revoke)
}

// validity returns the session's Until, and why it ended (nil while live).
func (s *session) validity() (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.until, s.err
}

// hold registers a lease, or reports that the session has ended.
func (s *session) hold(le *Lease) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.leases[le] = struct{}{}
	return nil
}

// drop forgets a released lease.
func (s *session) drop(le *Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.leases, le)
}

// live reports whether the session has not ended.
func (s *session) live() bool {
	select {
	case <-s.ended:
		return false
	default:
		return true
	}
}

// revoke revokes the session's etcd lease, once it has ended and its
// Until has passed: a holder that was paused when the session ended has not
// heard of the loss, and acts until the Until it last saw, so no other
// owner may be handed its keys before then. Close revokes at once: the
// Locker's owner gave up its locks.
func (s *session) revoke() {
	until, _ := s.validity()
	_ = wait.Sleep(s.keep, time.Until(until))
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.nodeTimeout)
	defer cancel()
	_, _ = s.cs.Client().Revoke(ctx, s.cs.Lease())
}
