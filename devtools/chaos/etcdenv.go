package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/internal/wait"
)

// resetEtcd heals every etcd member and sets its wall clock back, waits
// until every member serves and a majority follows one leader, and ends
// every session an earlier run left: their etcd leases revoked and the
// locks' keys deleted. A bed without etcd has nothing to reset.
func (e *Env) resetEtcd(ctx context.Context) error {
	if e.etcd == nil {
		return nil
	}
	for i, n := range e.bed.Etcd {
		_ = n.Resume(ctx)
		if err := errors.Join(n.Heal(ctx), n.AddLatency(ctx, 0)); err != nil {
			return err
		}
		if e.etcdClock[i] != 0 {
			if err := n.SetClockOffset(ctx, 0); err != nil {
				return err
			}
			e.etcdClock[i] = 0
		}
	}
	for _, n := range e.bed.Etcd {
		if err := serving(ctx, n); err != nil {
			return err
		}
	}
	if _, _, err := e.etcdLeader(ctx); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	leases, err := e.etcd.Leases(cctx)
	if err != nil {
		return fmt.Errorf("etcd: list leases: %w", err)
	}
	for _, l := range leases.Leases {
		_, err := e.etcd.Revoke(cctx, l.ID)
		if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) && !errors.Is(err, rpctypes.ErrGRPCLeaseNotFound) {
			return fmt.Errorf("etcd: revoke lease %x: %w", l.ID, err)
		}
	}
	if _, err := e.etcd.Delete(cctx, etcdPrefix, clientv3.WithPrefix()); err != nil {
		return fmt.Errorf("etcd: delete %s*: %w", etcdPrefix, err)
	}
	return nil
}

// serving waits until member n serves clients; one that does not within
// 30s (a step killed it and could not restart it) is restarted.
func serving(ctx context.Context, n *testbed.EtcdNode) error {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := n.WaitReady(rctx)
	cancel()
	if err == nil {
		return nil
	}
	if err := n.Restart(ctx); err != nil {
		return err
	}
	rctx, cancel = context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return n.WaitReady(rctx)
}

// etcdLeader returns the member a majority follows, and its index, waiting
// up to 20s for an election to end.
func (e *Env) etcdLeader(ctx context.Context) (int, *testbed.EtcdNode, error) {
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		l, err := e.bed.EtcdLeader(lctx)
		if err == nil {
			return slices.Index(e.bed.Etcd, l), l, nil
		}
		if wait.Sleep(lctx, 200*time.Millisecond) != nil {
			return 0, nil, fmt.Errorf("etcd: %w", err)
		}
	}
}

// Faults of the staged etcd scenarios (etcdStaged), each on the leader.
const (
	// memberRestart kills the leader and restarts it with its data.
	memberRestart = "member-restart"
	// clockJumpMonotonic jumps the leader's wall and monotonic clocks.
	clockJumpMonotonic = "clock-jump-monotonic"
)

// hitLeader injects kind on the etcd leader and returns a function that
// waits until the fault is over: for a restart, until the member serves
// again (it restarts in the background from the kill on).
func (r *run) hitLeader(ctx context.Context, kind string) (func() error, error) {
	i, n, err := r.env.etcdLeader(ctx)
	if err != nil {
		return nil, err
	}
	jump := 2 * r.sc.TTL
	switch kind {
	case memberRestart:
		if err := n.Kill(ctx); err != nil {
			return nil, err
		}
		back := make(chan error, 1)
		go func() {
			hctx := context.WithoutCancel(ctx)
			if err := n.Restart(hctx); err != nil {
				back <- err
				return
			}
			back <- serving(hctx, n)
		}()
		r.note("killed the leader %s; it restarts with its data", n.Name())
		return func() error { return <-back }, nil
	case clockJump, clockJumpMonotonic:
		r.env.etcdClock[i] += jump
		if err := n.SetClockOffset(ctx, r.env.etcdClock[i]); err != nil {
			return nil, err
		}
		if kind == clockJumpMonotonic {
			if err := n.AdvanceMonotonic(ctx, jump); err != nil {
				return nil, err
			}
		}
		r.note("the leader %s's clock jumped %v forward (%s)", n.Name(), jump, kind)
		return func() error { return nil }, nil
	}
	return nil, fmt.Errorf("unknown etcd fault %q", kind)
}

// etcdStaged freezes a holder inside its lease (SIGSTOP: its session's
// keep-alive stops too) and hits the etcd leader with kind while it is
// frozen. The holder is thawed once another worker has read under a newer
// fence (the lock granted the key twice: the late write is staged), or a
// quarter TTL before its validity ends.
func etcdStaged(kind string) func(ctx context.Context, r *run) (int, error) {
	return func(ctx context.Context, r *run) (int, error) {
		ttl := r.sc.TTL
		injected, staged := 0, 0
		for i := 0; (injected < r.sc.Rounds || r.sc.Staged && staged == 0) && i < 3*r.sc.Rounds && ctx.Err() == nil; i++ {
			// A fresh hold: the last round's restart may have taken a
			// while, and the holds reported meanwhile are long over.
			h, idx, ok := r.hist.waitFor(ctx, r.hist.len(), 20*ttl, isHold(-1))
			if !ok {
				r.note("round %d: no holder within %v", i, 20*ttl)
				continue
			}
			p := r.procs[h.Worker]
			if err := p.pause(); err != nil {
				return injected, err
			}
			if r.wroteYet(idx, h) {
				r.note("round %d: worker %d wrote before the pause landed; not counted", i, h.Worker)
				if err := p.resume(); err != nil {
					return injected, err
				}
				continue
			}
			over, err := r.hitLeader(ctx, kind)
			if err != nil {
				_ = p.resume()
				return injected, err
			}
			injected++
			if r.doubleRead(ctx, i, h, idx) {
				staged++
			}
			if err := errors.Join(p.resume(), over()); err != nil {
				return injected, err
			}
			if _, _, ok := r.hist.waitFor(ctx, idx, 10*ttl, ownWrite(h.Worker, h.Round)); !ok {
				r.note("round %d: worker %d did not answer its write within %v", i, h.Worker, 10*ttl)
			}
		}
		return injected, ctx.Err()
	}
}

// doubleRead waits, until a quarter TTL before the frozen hold h's
// validity ends, for another worker to read under a newer fence, and
// notes what happened.
func (r *run) doubleRead(ctx context.Context, round int, h Event, idx int) bool {
	left := time.Until(time.Unix(0, h.Until)) - r.sc.TTL/4
	if e, _, ok := r.hist.waitFor(ctx, idx, max(left, 0), readAfter(h.Worker, h.Fence)); ok {
		r.note("round %d: worker %d read under fence %d while worker %d, frozen, held fence %d", round, e.Worker, e.Fence, h.Worker, h.Fence)
		return true
	}
	r.note("round %d: nobody else read during worker %d's lease (thawed %v before its validity ended)", round, h.Worker, r.sc.TTL/4)
	return false
}
