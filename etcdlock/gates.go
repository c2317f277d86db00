package etcdlock

import (
	"context"
	"sync"
)

// gates lets one Lock call per key of a Locker into the recipe at a time:
// the recipe's key is one per session and lock, so two calls of one
// session would share it and both believe they hold the lock.
type gates struct {
	mu sync.Mutex
	m  map[string]*gate
}

// gate is one key's turn: a token in a channel of capacity 1, and the
// number of calls that hold or wait for it.
type gate struct {
	turn chan struct{}
	refs int
}

func newGates() *gates { return &gates{m: map[string]*gate{}} }

// ref returns key's gate, counting the caller in.
func (g *gates) ref(key string) *gate {
	g.mu.Lock()
	defer g.mu.Unlock()
	gt := g.m[key]
	if gt == nil {
		gt = &gate{turn: make(chan struct{}, 1)}
		g.m[key] = gt
	}
	gt.refs++
	return gt
}

// unref counts the caller out of key's gate.
func (g *gates) unref(key string, gt *gate) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gt.refs--; gt.refs == 0 {
		delete(g.m, key)
	}
}

// enter takes key's turn, waiting until ctx ends (wait false: not at all).
func (g *gates) enter(ctx context.Context, key string, wait bool) bool {
	gt := g.ref(key)
	if !wait {
		select {
		case gt.turn <- struct{}{}:
			return true
		default:
		}
	} else {
		select {
		case gt.turn <- struct{}{}:
			return true
		case <-ctx.Done():
		}
	}
	g.unref(key, gt)
	return false
}

// leave gives key's turn back.
func (g *gates) leave(key string) {
	g.mu.Lock()
	gt := g.m[key]
	g.mu.Unlock()
	<-gt.turn
	g.unref(key, gt)
}
