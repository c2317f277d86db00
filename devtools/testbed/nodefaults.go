package testbed

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Partition cuts the node off from every client of its proxies: bytes in
// both directions are dropped and connections hang, until Heal.
func (n *node) Partition(ctx context.Context) error {
	for _, px := range n.front {
		if err := px.heal(ctx); err != nil {
			return fmt.Errorf("%s: partition: %w", n.srv.name, err)
		}
		if err := px.partition(); err != nil {
			return fmt.Errorf("%s: partition: %w", n.srv.name, err)
		}
	}
	return nil
}

// Heal ends a partition. Connections that lived through it are closed;
// clients reconnect.
func (n *node) Heal(ctx context.Context) error {
	var errs []error
	for _, px := range n.front {
		errs = append(errs, px.heal(ctx))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s: heal: %w", n.srv.name, err)
	}
	return nil
}

// AddLatency delays by d every byte the node sends through its proxies
// (its replies, and for an etcd member the raft messages to the members
// that dialed it); 0 removes the delay.
func (n *node) AddLatency(ctx context.Context, d time.Duration) error {
	var errs []error
	for _, px := range n.front {
		errs = append(errs, px.latency(ctx, d))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s: latency: %w", n.srv.name, err)
	}
	return nil
}

// link creates a new link to the node's first port: see RedisNode.Link.
func (n *node) link(name string) (*Link, error) {
	if name == "" {
		return nil, fmt.Errorf("%s: link: empty name", n.srv.name)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, fmt.Errorf("%s: link %s: the bed is closed", n.srv.name, name)
	}
	for _, l := range n.links {
		if l.name == name {
			return nil, fmt.Errorf("%s: link %s already exists", n.srv.name, name)
		}
	}
	// Created under n.mu, with the address it guards: see started.
	px, err := newNodeProxy(n.srv.name+"-"+name, n.direct[0])
	if err != nil {
		return nil, fmt.Errorf("%s: link %s: %w", n.srv.name, name, err)
	}
	l := &Link{name: name, node: n.srv.name, proxy: px}
	n.links = append(n.links, l)
	return l, nil
}
