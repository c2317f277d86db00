package testbed

import (
	"context"
	"fmt"
	"time"
)

// Link is an extra loopback listener in front of one node's server, for one
// client (or one group of clients): its faults apply to the connections made
// through it only, not to the node's Addr nor to the node's other links. With
// links, one client can be partitioned from a node while the others still
// reach it.
//
// Like the node's own proxy, a link keeps its address across Kill and
// Restart, and it is closed with the bed.
type Link struct {
	name  string
	node  string
	proxy *nodeProxy
}

// Name is the name the link was created with.
func (l *Link) Name() string { return l.name }

// Addr is the address the link's clients use. It stays the same for the
// life of the bed.
func (l *Link) Addr() string { return l.proxy.addr() }

// Partition cuts the link's clients off from the node: bytes in both
// directions are dropped and connections hang, until Heal. Other links and
// the node's Addr are not affected.
func (l *Link) Partition(ctx context.Context) error {
	if err := l.proxy.heal(ctx); err != nil {
		return fmt.Errorf("%s: link %s: partition: %w", l.node, l.name, err)
	}
	if err := l.proxy.partition(); err != nil {
		return fmt.Errorf("%s: link %s: partition: %w", l.node, l.name, err)
	}
	return nil
}

// Heal ends a partition of the link. Connections that lived through it are
// closed; clients reconnect.
func (l *Link) Heal(ctx context.Context) error {
	if err := l.proxy.heal(ctx); err != nil {
		return fmt.Errorf("%s: link %s: %w", l.node, l.name, err)
	}
	return nil
}

// AddLatency delays every reply through the link by d; 0 removes the delay.
func (l *Link) AddLatency(ctx context.Context, d time.Duration) error {
	if err := l.proxy.latency(ctx, d); err != nil {
		return fmt.Errorf("%s: link %s: latency: %w", l.node, l.name, err)
	}
	return nil
}
