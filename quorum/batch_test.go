package quorum_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/quorum"
)

// batchWatch is a client hook that counts the batches (pipelines of two
// script calls or more) and the NOSCRIPT answers inside them, and, while
// armed, holds every command until released.
type batchWatch struct {
	batches   atomic.Int64
	noScripts atomic.Int64

	mu      sync.Mutex
	gate    chan struct{} // nil: not armed
	blocked atomic.Int64
	seen    []string
}

func (h *batchWatch) arm() {
	h.mu.Lock()
	h.gate = make(chan struct{})
	h.mu.Unlock()
}

func (h *batchWatch) release() {
	h.mu.Lock()
	if h.gate != nil {
		close(h.gate)
		h.gate = nil
	}
	h.mu.Unlock()
}

func (h *batchWatch) wait(ctx context.Context, what string) {
	h.mu.Lock()
	g := h.gate
	h.mu.Unlock()
	if g == nil {
		return
	}
	h.blocked.Add(1)
	h.mu.Lock()
	h.seen = append(h.seen, what)
	h.mu.Unlock()
	select {
	case <-g:
	case <-ctx.Done():
		h.mu.Lock()
		h.seen = append(h.seen, "ctx-done:"+what+":"+fmt.Sprint(context.Cause(ctx)))
		h.mu.Unlock()
	}
}

func (h *batchWatch) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *batchWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.wait(ctx, fmt.Sprint(cmd.Args()[:3]))
		return next(ctx, cmd)
	}
}

func (h *batchWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.wait(ctx, fmt.Sprintf("pipeline of %d", len(cmds)))
		err := next(ctx, cmds)
		scripts := 0
		for _, c := range cmds {
			if c.Name() == "evalsha" {
				scripts++
				if e := c.Err(); e != nil && strings.HasPrefix(e.Error(), "NOSCRIPT") {
					h.noScripts.Add(1)
				}
			}
		}
		if scripts >= 2 {
			h.batches.Add(1)
		}
		return err
	}
}

// TestBatchesKeepMutualExclusion: the node workers put concurrent
// requests into one pipeline; many goroutines on a few keys still never
// hold one key at the same time, every Lock succeeds, and nothing is left
// on the nodes. The test fails if no request was ever batched, so that it
// keeps covering batches.
func TestBatchesKeepMutualExclusion(t *testing.T) {
	r := newRig(t)
	watch := &batchWatch{}
	l, err := quorum.New(r.hookedClients(t, watch), quorum.WithTTL(slow(30*time.Second)),
		quorum.WithNodeTimeout(slow(2*time.Second)), quorum.WithMaxWait(slow(60*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const keys, goroutines, rounds = 4, 24, 15
	var inside [keys]atomic.Int32
	var violations, done atomic.Int64
	ctx := ctxT(t, slow(2*time.Minute))
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range rounds {
				k := (g + i) % keys
				le, err := l.Lock(ctx, fmt.Sprintf("%s:%d", key(t), k))
				if err != nil {
					t.Errorf("goroutine %d: %v", g, err)
					return
				}
				if !inside[k].CompareAndSwap(0, 1) {
					violations.Add(1)
				}
				inside[k].Store(0)
				if err := le.Unlock(ctx); err != nil {
					t.Errorf("goroutine %d: unlock: %v", g, err)
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	if v := violations.Load(); v != 0 {
		t.Fatalf("%d times two goroutines held one key", v)
	}
	if n := done.Load(); n != goroutines*rounds {
		t.Fatalf("%d of %d rounds done", n, goroutines*rounds)
	}
	if watch.batches.Load() == 0 {
		t.Fatal("no request was batched: the test no longer covers batches")
	}
	t.Logf("%d rounds, %d batches of two requests or more, 0 overlaps", done.Load(), watch.batches.Load())
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for k := range keys {
		if got := r.count(t, fmt.Sprintf("%s:%d", key(t), k), ""); got != 5 {
			t.Fatalf("key %d left on %d nodes", k, 5-got)
		}
	}
}

// TestBatchAfterTheNodesLostTheirScripts: a batch whose node has lost the
// scripts (SCRIPT FLUSH, as after a restart) gets NOSCRIPT for each
// request; the worker loads the scripts and runs those requests again, so
// the callers never see it.
func TestBatchAfterTheNodesLostTheirScripts(t *testing.T) {
	r := newRig(t)
	watch := &batchWatch{}
	rec := &recorder{}
	l, err := quorum.New(r.hookedClients(t, watch), quorum.WithTTL(5*time.Minute), quorum.WithNodeTimeout(slow(10*time.Second)),
		quorum.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	defer watch.release()
	k := key(t)
	le, err := l.Lock(ctxT(t, 10*time.Second), k)
	if err != nil {
		t.Fatal(err)
	}
	// Lock returned at the majority: let the other nodes' requests end,
	// or the hook would hold one of them instead of the extension.
	eventually(t, 10*time.Second, "the lease is on every node", func() bool { return r.count(t, k, le.Token()) == 5 })
	const n = 6
	// round queues n acquisitions on every node behind an extension held
	// in the hook, flushes the scripts when asked, and lets them go as one
	// batch per node.
	round := func(name string, flush bool) {
		t.Helper()
		watch.blocked.Store(0)
		watch.arm()
		extended := make(chan error, 1)
		go func() { extended <- le.Extend(ctxT(t, time.Minute), 5*time.Minute) }()
		eventually(t, 10*time.Second, "the extension is held on every node", func() bool { return watch.blocked.Load() == 5 })
		errs := make(chan error, n)
		leases := make(chan lease.Lease, n)
		for i := range n {
			go func() {
				le, err := l.TryLock(ctxT(t, time.Minute), fmt.Sprintf("%s:%s:%d", k, name, i))
				if err == nil {
					leases <- le
				}
				errs <- err
			}()
		}
		queued := func() []int {
			var q []int
			for i := range 5 {
				q = append(q, l.Queued(i))
			}
			return q
		}
		deadline := time.Now().Add(slow(10 * time.Second))
		for q := queued(); slices.ContainsFunc(q, func(v int) bool { return v != n }); q = queued() {
			if time.Now().After(deadline) {
				watch.mu.Lock()
				t.Logf("seen: %q", watch.seen)
				watch.mu.Unlock()
				t.Fatalf("%s: the acquisitions did not queue on every node: %v queued, %d blocked", name, q, watch.blocked.Load())
			}
			time.Sleep(10 * time.Millisecond)
		}
		if flush {
			for i := range 5 {
				if err := r.admin[i].ScriptFlush(ctxT(t, 10*time.Second)).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
		watch.release()
		if err := <-extended; err != nil {
			t.Fatalf("%s: extend: %v", name, err)
		}
		var failed []error
		for range n {
			if err := <-errs; err != nil {
				failed = append(failed, err)
			}
		}
		if len(failed) > 0 {
			t.Fatalf("%s: %d acquisitions failed: %v", name, len(failed), errors.Join(failed...))
		}
		close(leases)
		before := len(rec.snapshot().releases)
		for le := range leases {
			if err := le.Unlock(ctxT(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
		}
		// Unlock returns at the majority; the next round starts once every
		// node has answered, so that nothing of this one is still queued.
		eventually(t, 30*time.Second, "every release has ended", func() bool { return len(rec.snapshot().releases) == before+n })
	}
	// The first round's batches load the scripts on every node; the
	// second finds them gone.
	round("warm", false)
	if watch.noScripts.Load() != 0 {
		t.Fatalf("%d NOSCRIPT answers before the flush", watch.noScripts.Load())
	}
	round("flushed", true)
	if watch.noScripts.Load() == 0 {
		t.Fatal("no batch met NOSCRIPT: the test no longer covers the reload")
	}
	if err := le.Unlock(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
}
