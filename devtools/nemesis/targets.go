package nemesis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/internal/wait"
)

// Target is one node a step can hit: a Redis node or an etcd member.
type Target interface {
	Name() string
	Pause(ctx context.Context) error
	Resume(ctx context.Context) error
	Partition(ctx context.Context) error
	Heal(ctx context.Context) error
	AddLatency(ctx context.Context, d time.Duration) error
	Kill(ctx context.Context) error
	// Restart starts a killed node again, with its data or without.
	Restart(ctx context.Context, keepData bool) error
}

// Cluster is what a plan runs on: its nodes and, for a cluster with a
// leader, how to find it.
type Cluster struct {
	Nodes []Target
	// Leader returns the index of the node that leads now; nil for a
	// cluster without a leader (independent Redis masters).
	Leader func(ctx context.Context) (int, error)
	// DataKept says that its nodes restart with their data only: a plan
	// with KillRestartEmpty steps does not run on it.
	DataKept bool
}

// Role says which member of a cluster with a leader a step hits.
type Role int

// The roles a step can aim at.
const (
	// AnyNode hits Step.Node.
	AnyNode Role = iota
	// Leader hits the member that leads when the step runs.
	Leader
	// Follower hits a member that does not lead when the step runs
	// (Step.Node picks which).
	Follower
)

func (r Role) String() string {
	switch r {
	case AnyNode:
		return "any"
	case Leader:
		return "leader"
	case Follower:
		return "follower"
	}
	return fmt.Sprintf("Role(%d)", int(r))
}

// Redis is the cluster of a bed's independent Redis masters.
func Redis(nodes []*testbed.RedisNode) Cluster {
	c := Cluster{Nodes: make([]Target, len(nodes))}
	for i, n := range nodes {
		c.Nodes[i] = n
	}
	return c
}

// Etcd is the cluster of a bed's etcd members. Their Restart keeps their
// data (the bed restarts a member with its data directory only: DataKept)
// and returns once the member serves again. Leader is the member a
// majority follows (Bed.EtcdLeader).
func Etcd(bed *testbed.Bed) Cluster {
	c := Cluster{Nodes: make([]Target, len(bed.Etcd)), DataKept: true}
	for i, n := range bed.Etcd {
		c.Nodes[i] = etcdMember{n}
	}
	c.Leader = func(ctx context.Context) (int, error) {
		l, err := bed.EtcdLeader(ctx)
		if err != nil {
			return 0, err
		}
		return slices.Index(bed.Etcd, l), nil
	}
	return c
}

type etcdMember struct{ *testbed.EtcdNode }

func (m etcdMember) Restart(ctx context.Context, keepData bool) error {
	if !keepData { // RunOn refuses such plans before they start
		return fmt.Errorf("%s: restart without its data: %w: the bed restarts an etcd member with its data directory only",
			m.Name(), errors.ErrUnsupported)
	}
	if err := m.EtcdNode.Restart(ctx); err != nil {
		return err
	}
	return m.WaitReady(ctx)
}

// leaderWait bounds the search for a leader before a step that aims at a
// role; a cluster still electing one gets that long.
const leaderWait = 15 * time.Second

// resolve returns s aimed at a node: the member with s's role now, or,
// when no leader emerged within leaderWait, s.Node with no role.
func (c Cluster) resolve(ctx context.Context, s Step) Step {
	if s.Role == AnyNode {
		return s
	}
	lctx, cancel := context.WithTimeout(ctx, leaderWait)
	defer cancel()
	for lctx.Err() == nil {
		leader, err := c.Leader(lctx)
		if err == nil && leader >= 0 {
			if s.Role == Leader {
				s.Node = leader
				return s
			}
			others := make([]int, 0, len(c.Nodes)-1)
			for i := range c.Nodes {
				if i != leader {
					others = append(others, i)
				}
			}
			if len(others) > 0 {
				s.Node = others[s.Node%len(others)]
				return s
			}
		}
		_ = wait.Sleep(lctx, 200*time.Millisecond)
	}
	s.Role = AnyNode
	return s
}

// PostgresHA is the cluster of a bed's Postgres HA group: its data nodes,
// then its monitor (the last node). The leader is the primary; Follower
// steps hit the standby or the monitor (Step.Node picks which). Every
// member restarts with its data only (DataKept).
func PostgresHA(g *testbed.PostgresGroup) Cluster {
	c := Cluster{DataKept: true}
	for _, n := range g.Nodes {
		c.Nodes = append(c.Nodes, pghaMember{n})
	}
	c.Nodes = append(c.Nodes, pghaMonitor{g.Monitor()})
	c.Leader = func(ctx context.Context) (int, error) {
		p, err := g.Primary(ctx)
		if err != nil {
			return 0, err
		}
		return slices.Index(g.Nodes, p), nil
	}
	return c
}

type pghaMember struct{ *testbed.PostgresHANode }

func (m pghaMember) Restart(ctx context.Context, keepData bool) error {
	if !keepData { // RunOn refuses such plans before they start
		return fmt.Errorf("%s: restart without its data: %w", m.Name(), errors.ErrUnsupported)
	}
	return m.PostgresHANode.Restart(ctx)
}

type pghaMonitor struct{ *testbed.PostgresHAMonitor }

func (m pghaMonitor) Restart(ctx context.Context, keepData bool) error {
	if !keepData {
		return fmt.Errorf("%s: restart without its data: %w", m.Name(), errors.ErrUnsupported)
	}
	return m.PostgresHAMonitor.Restart(ctx)
}
