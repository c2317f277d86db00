// Package nemesis injects a planned, reproducible series of faults into the
// Redis nodes of a test bed while a workload runs.
//
// A Plan is a bounded list of steps; each step hits one node with one fault
// for a while and then heals it. Plans come from a seed, so a failing run
// can be replayed exactly.
package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/quorumlock/quorumlock/integration/testbed"
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
)

var kindNames = [...]string{"pause", "partition", "latency", "kill+restart(keep)", "kill+restart(empty)"}

func (k Kind) String() string {
	if k < 0 || int(k) >= len(kindNames) {
		return fmt.Sprintf("Kind(%d)", int(k))
	}
	return kindNames[k]
}

// AllKinds lists every fault.
var AllKinds = []Kind{Pause, Partition, Latency, KillRestartKeep, KillRestartEmpty}

// Step is one fault on one node.
type Step struct {
	Node int
	Kind Kind
	// For is how long the fault lasts before it is healed (for kills: how
	// long the node stays down).
	For time.Duration
	// Delay is the added latency, for Latency steps.
	Delay time.Duration
	// Gap is the quiet time after the step heals.
	Gap time.Duration
}

func (s Step) String() string {
	if s.Kind == Latency {
		return fmt.Sprintf("node %d: %s %v for %v", s.Node, s.Kind, s.Delay, s.For)
	}
	return fmt.Sprintf("node %d: %s for %v", s.Node, s.Kind, s.For)
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
	rng := rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15))
	plan := make([]Step, opts.Steps)
	for i := range plan {
		s := Step{
			Node: rng.IntN(opts.Nodes),
			Kind: kinds[rng.IntN(len(kinds))],
			For:  time.Duration(1+rng.Int64N(int64(opts.MaxFor))) * time.Nanosecond,
			Gap:  time.Duration(rng.Int64N(int64(opts.MaxFor/2) + 1)),
		}
		if s.Kind == Latency {
			s.Delay = time.Duration(1 + rng.Int64N(int64(opts.MaxDelay)))
		}
		plan[i] = s
	}
	return plan, nil
}

// Run executes the plan step by step on nodes, healing each fault before
// the next step, and calls log (when not nil) for each step. It stops early
// when ctx ends; every fault it injected is healed before it returns.
func Run(ctx context.Context, nodes []*testbed.RedisNode, plan []Step, log func(Step)) error {
	for _, s := range plan {
		if s.Node < 0 || s.Node >= len(nodes) {
			return fmt.Errorf("nemesis: step %v names node %d of %d", s, s.Node, len(nodes))
		}
	}
	for _, s := range plan {
		if ctx.Err() != nil {
			return nil
		}
		if log != nil {
			log(s)
		}
		if err := apply(ctx, nodes[s.Node], s); err != nil {
			return fmt.Errorf("nemesis: %v: %w", s, err)
		}
		_ = wait.Sleep(ctx, s.Gap)
	}
	return nil
}

func apply(ctx context.Context, n *testbed.RedisNode, s Step) error {
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
	}
	return fmt.Errorf("unknown fault %v", s.Kind)
}
