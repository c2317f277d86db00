package quorum

import (
	"context"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ReleaseChannelPrefix + key is the Pub/Sub channel on which the release
// script announces that it deleted key, so that Lock waiters retry at once
// instead of at the end of their backoff.
const ReleaseChannelPrefix = "quorumlock:released:"

// waker wakes this Locker's Lock calls that wait for a key when the nodes
// announce its release, over one Pub/Sub connection per node. Waiters are
// served oldest first: the oldest is woken once a majority announced a
// release since its last attempt (before that it would be refused). The
// backoff still runs, so a lost message costs latency, never progress.
type waker struct {
	l    *Locker
	mu   sync.Mutex
	keys map[string][]*waiter // per key, oldest first
	subs []*redis.PubSub      // per node; nil until the first wait

	// dirty: the subscriptions lag the waiters; syncing: sync runs (both
	// under mu). sync alone sends (UN)SUBSCRIBE and uses subscribed.
	dirty, syncing bool
	subscribed     map[string]bool
	syncs, readers sync.WaitGroup
}

// waiter is one Lock call waiting for its keys.
type waiter struct {
	keys []string
	wake chan struct{} // capacity 1: a wake-up while it is not waiting is kept
	// The nodes that announced a release since the last attempt (nodes
	// 0..63; others count in extra), under the waker's mu.
	heard uint64
	extra int
}

func newWaker(l *Locker) *waker {
	return &waker{l: l, keys: map[string][]*waiter{}, subscribed: map[string]bool{}}
}

// signal sends on a channel of capacity 1 unless a signal is pending.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// join queues a waiter for keys (with behind, only when waiters already
// wait for one of them, so as not to overtake them), or returns nil. A
// waiter joins every key's queue at once, so the queues never disagree on
// which of two waiters is older. The first waiter of a key has the nodes
// announce its releases to this Locker.
func (w *waker) join(keys []string, behind bool) *waiter {
	w.mu.Lock()
	waited := slices.ContainsFunc(keys, func(k string) bool { return len(w.keys[k]) > 0 })
	if w.l.isClosed() || (behind && !waited) {
		w.mu.Unlock()
		return nil
	}
	if w.subs == nil {
		w.open()
	}
	wt := &waiter{keys: keys, wake: make(chan struct{}, 1)}
	fresh := false
	for _, k := range keys {
		fresh = fresh || len(w.keys[k]) == 0
		w.keys[k] = append(w.keys[k], wt)
	}
	w.mu.Unlock()
	if fresh {
		w.kickSync()
	}
	return wt
}

// kickSync has sync run in the background, off Lock's path, by one
// goroutine at a time.
func (w *waker) kickSync() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.dirty = true
	if !w.syncing && !w.l.isClosed() {
		w.syncing = true
		w.syncs.Go(w.sync)
	}
}

// front reports whether wt is the oldest waiter of each of its keys.
func (w *waker) front(wt *waiter) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range wt.keys {
		if q := w.keys[k]; len(q) == 0 || q[0] != wt {
			return false
		}
	}
	return true
}

// unregister removes a waiter; the last waiter of a key unsubscribes it.
func (w *waker) unregister(wt *waiter) {
	if wt == nil {
		return
	}
	w.mu.Lock()
	emptied := false
	for _, k := range wt.keys {
		q := w.keys[k]
		i := slices.Index(q, wt)
		if i < 0 { // never: only unregister removes a waiter, once
			continue
		}
		q = slices.Delete(q, i, i+1)
		if i == 0 && len(q) > 0 {
			// The oldest leaves: what it heard, and a wake-up it did not
			// use, pass to the next, or a release it was told of would go
			// unused.
			q[0].heard |= wt.heard
			q[0].extra += wt.extra
			if len(wt.wake) > 0 {
				signal(q[0].wake)
			}
		}
		w.keys[k] = q
		if len(q) == 0 {
			delete(w.keys, k)
			emptied = true
		}
	}
	w.mu.Unlock()
	if emptied {
		w.kickSync()
	}
}

// open starts one Pub/Sub connection and its reader per node; w.mu must be
// held.
func (w *waker) open() {
	w.subs = make([]*redis.PubSub, len(w.l.nodes))
	for i, n := range w.l.nodes {
		ps := n.client.Subscribe(context.Background())
		w.subs[i] = ps
		w.readers.Go(func() { w.read(i, ps) })
	}
}

// read delivers node i's release messages until its connection closes.
func (w *waker) read(i int, ps *redis.PubSub) {
	for m := range ps.Channel() {
		w.announced(strings.TrimPrefix(m.Channel, ReleaseChannelPrefix), i)
	}
}

// sync subscribes every node to the channels that have waiters and
// unsubscribes the others, until no change is left. An unreachable node's
// waiters fall back to their backoff.
func (w *waker) sync() {
	for {
		w.mu.Lock()
		if !w.dirty || w.l.isClosed() {
			w.syncing = false
			w.mu.Unlock()
			return
		}
		w.dirty = false
		want := make(map[string]bool, len(w.keys))
		for k := range w.keys {
			want[ReleaseChannelPrefix+k] = true
		}
		subs := w.subs
		w.mu.Unlock()
		var add, drop []string
		for ch := range want {
			if !w.subscribed[ch] {
				add = append(add, ch)
			}
		}
		for ch := range w.subscribed {
			if !want[ch] {
				drop = append(drop, ch)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), w.l.cfg.nodeTimeout)
		var wg sync.WaitGroup
		for _, ps := range subs {
			wg.Go(func() {
				if len(add) > 0 {
					_ = ps.Subscribe(ctx, add...)
				}
				if len(drop) > 0 {
					_ = ps.Unsubscribe(ctx, drop...)
				}
			})
		}
		wg.Wait()
		cancel()
		w.subscribed = want
	}
}

// announced records node's release announcement for key, and wakes the
// oldest waiter once a majority announced since its last attempt.
func (w *waker) announced(key string, node int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.keys[key]
	if len(q) == 0 {
		return
	}
	wt := q[0]
	if node < 64 {
		wt.heard |= 1 << uint(node)
	} else {
		wt.extra++
	}
	if bits.OnesCount64(wt.heard)+wt.extra >= w.l.quorum {
		signal(wt.wake)
	}
}

// released wakes the oldest waiter of key: this Locker's own Unlock saw a
// majority release it.
func (w *waker) released(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if q := w.keys[key]; len(q) > 0 {
		signal(q[0].wake)
	}
}

// attempting forgets what a waiter heard: its next attempt sees it.
func (w *waker) attempting(wt *waiter) {
	if wt == nil {
		return
	}
	w.mu.Lock()
	wt.heard, wt.extra = 0, 0
	w.mu.Unlock()
	select {
	case <-wt.wake:
	default:
	}
}

// sleep waits up to d, until wake receives (a nil wake never does) or ctx
// ends. It reports whether ctx is still live, and whether wake ended it.
func sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) (live, woken bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-wake:
		return true, true
	case <-t.C:
		return true, false
	case <-ctx.Done():
		return false, false
	}
}

// close ends the subscriptions and the goroutines; the Locker is closed
// already, so no new wait opens one.
func (w *waker) close() {
	w.mu.Lock()
	subs := w.subs
	w.mu.Unlock()
	w.syncs.Wait() // a sync under way ends within a node timeout
	for _, ps := range subs {
		_ = ps.Close()
	}
	w.readers.Wait()
}
