// Package nemesis injects a planned, reproducible series of faults into the
// Redis nodes or the etcd members of a test bed while a workload runs.
//
// A Plan is a bounded list of steps; each step hits one node with one fault
// for a while and then heals it. Plans come from a seed, so a failing run
// can be replayed exactly. On a cluster with a leader (etcd), a plan can
// aim its steps at the leader and at a follower in turn (PlanOptions.Roles):
// which member that is is resolved when the step runs.
package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/internal/wait"
)

// Kind is a kind of fault.
type Kind int

// The faults a step can inject.
const (
	// Pause freezes the node (SIGSTOP or docker pause), then resumes it.
	Pause Kind = iota
	// Partition drops the node's traffic both ways, then heals it.
	Partition
	// Latency delays the node's replies, then removes the delay.
	Latency
	// KillRestartKeep kills the node and restarts it with its data.
	KillRestartKeep
	// KillRestartEmpty kills the node and restarts it without its data.
	KillRestartEmpty
	// ClockJump moves the node's wall clock forward by Step.Delay, then,
	// after Step.For, back to the real time. It needs nodes with a clock
	// to move (Clocked: a bed started with testbed.Options.Clock).
	ClockJump
)

var kindNames = [...]string{"pause", "partition", "latency", "kill+restart(keep)", "kill+restart(empty)", "clock-jump"}

func (k Kind) String() string {
	if k < 0 || int(k) >= len(kindNames) {
		return fmt.Sprintf("Kind(%d)", int(k))
	}
	return kindNames[k]
}

// AllKinds lists every fault that any bed's nodes take; ClockJump, which
// needs nodes with a clock to move, is not among them.
var AllKinds = []Kind{Pause, Partition, Latency, KillRestartKeep, KillRestartEmpty}

// Clocked is a node whose wall clock a ClockJump step can move.
type Clocked interface {
	// SetClockOffset sets the node's wall clock to d from the real one.
	SetClockOffset(ctx context.Context, d time.Duration) error
}

// Step is one fault on one node.
type Step struct {
	Node int
	Kind Kind
	// For is how long the fault lasts before it is healed (for kills: how
	// long the node stays down).
	For time.Duration
	// Delay is the added latency, for Latency steps, and the size of the
	// jump, for ClockJump steps.
	Delay time.Duration
	// Gap is the quiet time after the step heals.
	Gap time.Duration
	// Role aims the step at the leader or at a follower (Node then picks
	// which follower); AnyNode hits Node. Run hands its log the step with
	// Node resolved.
	Role Role
}

func (s Step) String() string {
	node := fmt.Sprintf("node %d", s.Node)
	if s.Role != AnyNode {
		node += " (" + s.Role.String() + ")"
	}
	switch s.Kind {
	case Latency:
		return fmt.Sprintf("%s: %s %v for %v", node, s.Kind, s.Delay, s.For)
	case ClockJump:
		return fmt.Sprintf("%s: %s +%v for %v", node, s.Kind, s.Delay, s.For)
	}
	return fmt.Sprintf("%s: %s for %v", node, s.Kind, s.For)
}

// PlanOptions shapes a random plan.
type PlanOptions struct {
	Seed  uint64
	Nodes int
	Steps int
	// Kinds to draw from; empty means AllKinds.
	Kinds []Kind
	// MaxFor bounds each fault's length (default 300ms).
	MaxFor time.Duration
	// MaxDelay bounds added latency (default 100ms).
	MaxDelay time.Duration
	// MaxJump bounds a clock jump (default 2*MaxFor); a jump is drawn
	// from MaxJump/2 to MaxJump, so that it outlasts what it aims at.
	MaxJump time.Duration
	// Roles aims the steps at the leader (even steps) and at a follower
	// (odd steps) of a cluster that has one; the rest of the plan is drawn
	// as without it.
	Roles bool
}

// Plan draws a reproducible plan from opts.Seed.
func Plan(opts PlanOptions) ([]Step, error) {
	if opts.Nodes <= 0 || opts.Steps <= 0 {
		return nil, errors.New("nemesis: a plan needs Nodes > 0 and Steps > 0")
	}
	if opts.Steps > 10000 {
		return nil, fmt.Errorf("nemesis: %d steps is more than a test should run", opts.Steps)
	}
	kinds := opts.Kinds
	if len(kinds) == 0 {
		kinds = AllKinds
	}
	if opts.MaxFor <= 0 {
		opts.MaxFor = 300 * time.Millisecond
	}
	if opts.MaxDelay <= 0 {
		opts.MaxDelay = 100 * time.Millisecond
	}
	if opts.MaxJump <= 0 {
		opts.MaxJump = 2 * opts.MaxFor
	}
	rng := rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15))
	plan := make([]Step, opts.Steps)
	for i := range plan {
		s := Step{
			Node: rng.IntN(opts.Nodes),
			Kind: kinds[rng.IntN(len(kinds))],
			For:  time.Duration(1+rng.Int64N(int64(opts.MaxFor))) * time.Nanosecond,
			Gap:  time.Duration(rng.Int64N(int64(opts.MaxFor/2) + 1)),
		}
		switch s.Kind {
		case Latency:
			s.Delay = time.Duration(1 + rng.Int64N(int64(opts.MaxDelay)))
		case ClockJump:
			s.Delay = opts.MaxJump/2 + time.Duration(rng.Int64N(int64(opts.MaxJump/2)+1))
		}
		if opts.Roles {
			s.Role = []Role{Leader, Follower}[i%2]
		}
		plan[i] = s
	}
	return plan, nil
}

// Run executes the plan step by step on Redis nodes, healing each fault
// before the next step, and calls log (when not nil) for each step. It
// stops early when ctx ends; every fault it injected is healed before it
// returns.
func Run(ctx context.Context, nodes []*testbed.RedisNode, plan []Step, log func(Step)) error {
	return RunOn(ctx, Redis(nodes), plan, log)
}

// RunOn is Run on any cluster: steps with a Role are resolved to the
// member that has it when they run.
func RunOn(ctx context.Context, c Cluster, plan []Step, log func(Step)) error {
	for _, s := range plan {
		if s.Node < 0 || s.Node >= len(c.Nodes) {
			return fmt.Errorf("nemesis: step %v names node %d of %d", s, s.Node, len(c.Nodes))
		}
		if s.Role != AnyNode && c.Leader == nil {
			return fmt.Errorf("nemesis: step %v aims at a role, but the cluster has no leader", s)
		}
		if s.Kind == KillRestartEmpty && c.DataKept {
			return fmt.Errorf("nemesis: step %v: %w: the cluster's nodes restart with their data only", s, errors.ErrUnsupported)
		}
		if s.Kind == ClockJump {
			if err := c.clocked(); err != nil {
				return fmt.Errorf("nemesis: step %v: %w", s, err)
			}
		}
	}
	for _, s := range plan {
		if ctx.Err() != nil {
			return nil
		}
		s = c.resolve(ctx, s)
		if log != nil {
			log(s)
		}
		if err := apply(ctx, c.Nodes[s.Node], s); err != nil {
			return fmt.Errorf("nemesis: %v: %w", s, err)
		}
		_ = wait.Sleep(ctx, s.Gap)
	}
	return nil
}

// clocked checks that a ClockJump step, whichever node it resolves to,
// finds a clock to move.
func (c Cluster) clocked() error {
	for _, n := range c.Nodes {
		if _, ok := n.(Clocked); !ok {
			return fmt.Errorf("%w: node %s has no clock to move", errors.ErrUnsupported, n.Name())
		}
	}
	return nil
}

func apply(ctx context.Context, n Target, s Step) error {
	// Healing must happen even when ctx has ended.
	heal := context.WithoutCancel(ctx)
	switch s.Kind {
	case Pause:
		if err := n.Pause(ctx); err != nil {
			return err
		}
		_ = wait.Sleep(ctx, s.For)
		return n.Resume(heal)
	case Partition:
		if err := n.Partition(ctx); err != nil {
			return err
		}
		_ = wait.Sleep(ctx, s.For)
		return n.Heal(heal)
	case Latency:
		if err := n.AddLatency(ctx, s.Delay); err != nil {
			return err
		}
		_ = wait.Sleep(ctx, s.For)
		return n.AddLatency(heal, 0)
	case KillRestartKeep, KillRestartEmpty:
		if err := n.Kill(ctx); err != nil {
			return err
		}
		_ = wait.Sleep(ctx, s.For)
		return n.Restart(heal, s.Kind == KillRestartKeep)
	case ClockJump:
		c := n.(Clocked) // RunOn checked
		if err := c.SetClockOffset(ctx, s.Delay); err != nil {
			return err
		}
		_ = wait.Sleep(ctx, s.For)
		return c.SetClockOffset(heal, 0)
	}
	return fmt.Errorf("unknown fault %v", s.Kind)
}
