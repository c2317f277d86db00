package testbed

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrNoEtcdLeader is returned by Bed.EtcdLeader when no majority of the
// members names the same leader.
var ErrNoEtcdLeader = errors.New("testbed: no etcd leader that a majority of members agrees on")

// EtcdStatus is a member's own view of the cluster, as it reports it to
// Status.
type EtcdStatus struct {
	// MemberID is the ID of the member that answered.
	MemberID uint64
	// Leader is the ID of the leader the member follows, 0 for none.
	Leader uint64
	// RaftTerm is the member's raft term.
	RaftTerm uint64
	// RaftIndex is the index of the member's last raft entry.
	RaftIndex uint64
}

// EtcdEndpoints returns the stable client address of every etcd member,
// through its proxy.
func (b *Bed) EtcdEndpoints() []string {
	eps := make([]string, len(b.Etcd))
	for i, n := range b.Etcd {
		eps[i] = n.Addr()
	}
	return eps
}

// Status asks the member, directly (bypassing its proxy and the faults
// injected there), for its own view: its raft term and index, and the
// leader it follows (0 for none). It uses etcd's HTTP JSON gateway; the
// call ends with ctx, and after 5s at most.
func (n *EtcdNode) Status(ctx context.Context) (EtcdStatus, error) {
	var st gatewayStatus
	if err := gatewayCall(ctx, n.DirectAddr(), "/v3/maintenance/status", &st); err != nil {
		return EtcdStatus{}, fmt.Errorf("%s: status: %w", n.srv.name, err)
	}
	if st.Header.MemberID == 0 {
		return EtcdStatus{}, fmt.Errorf("%s: status: the answer names no member", n.srv.name)
	}
	return EtcdStatus{
		MemberID:  uint64(st.Header.MemberID),
		Leader:    uint64(st.Leader),
		RaftTerm:  uint64(st.RaftTerm),
		RaftIndex: uint64(st.RaftIndex),
	}, nil
}

// WaitReady waits until the member serves clients: it has started and
// joined a quorum, which etcd requires before it answers anything. It
// waits until ctx ends, or for Options.StartTimeout when ctx has no
// deadline.
func (n *EtcdNode) WaitReady(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, n.srv.startTimeout)
		defer cancel()
	}
	var last error
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, last = n.Status(cctx)
		cancel()
		if last == nil {
			return nil
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return fmt.Errorf("%s: not ready: %w (last: %v)", n.srv.name, err, last)
		}
	}
}

// learnIDs asks the cluster for its members and records each one's ID.
func learnIDs(ctx context.Context, members []*EtcdNode) error {
	var list gatewayMembers
	if err := gatewayCall(ctx, members[0].DirectAddr(), "/v3/cluster/member/list", &list); err != nil {
		return fmt.Errorf("member list: %w", err)
	}
	for _, n := range members {
		for _, m := range list.Members {
			if m.Name == n.srv.name {
				n.mu.Lock()
				n.id = uint64(m.ID)
				n.mu.Unlock()
			}
		}
		if n.ID() == 0 {
			return fmt.Errorf("%s is not in the member list %+v", n.srv.name, list.Members)
		}
	}
	return nil
}

// EtcdLeader asks every member, directly and at once, which leader it
// follows, and returns the member that a majority of the cluster names.
// Members that do not answer within 2s (paused, killed) count
// against a majority; a partitioned member answers with its own view.
func (b *Bed) EtcdLeader(ctx context.Context) (*EtcdNode, error) {
	leaders := make([]uint64, len(b.Etcd))
	var wg sync.WaitGroup
	for i, n := range b.Etcd {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			if st, err := n.Status(cctx); err == nil {
				leaders[i] = st.Leader
			}
		}()
	}
	wg.Wait()
	votes := make(map[uint64]int)
	for _, id := range leaders {
		if id != 0 {
			votes[id]++
		}
	}
	for _, n := range b.Etcd {
		if votes[n.ID()] > len(b.Etcd)/2 {
			return n, nil
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoEtcdLeader, err)
	}
	return nil, fmt.Errorf("%w (leaders named: %v)", ErrNoEtcdLeader, leaders)
}
