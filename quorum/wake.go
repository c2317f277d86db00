package quorum

import (
	"context"
	"math/bits"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// ReleaseChannelPrefix + key is the Pub/Sub channel on which the release
// script announces that it deleted key, so that Lock waiters retry at once.
const ReleaseChannelPrefix = "quorumlock:released:"

// waker wakes the oldest Lock call of this Locker waiting for a key once a
// majority announced its release since its last attempt (one Pub/Sub
// connection per node). The backoff still runs: a lost message costs latency.
type waker struct {
	l    *Locker
	mu   sync.Mutex
	keys map[string][]*waiter // per key, oldest first
	held map[string]int       // per key, this Locker's leases that hold it (see hold)
	subs []*redis.PubSub      // per node; nil until the first wait

	dirty, syncing bool            // under mu: the subscriptions lag the waiters; sync runs
	subscribed     map[string]bool // sync's alone, as are (UN)SUBSCRIBE
	syncs, readers sync.WaitGroup
}

// waiter is one Lock call waiting for its keys.
type waiter struct {
	keys  []string
	wake  chan struct{} // capacity 1: a wake-up while it is not waiting is kept
	heard uint64        // nodes 0..63 that announced a release since the last attempt (under mu)
	extra int           // such nodes above 63

	offers   chan offer // capacity 1: a lease handed over to it (see handover)
	reserved bool       // under mu: an Unlock is handing the keys over to it
	gone     bool       // under mu: unregistered; it takes no more offers
	anyOf    bool       // it waits for any one of its keys (a semaphore's permits): no hand-over
}

// signal sends on a channel of capacity 1 unless a signal is pending.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// join queues a waiter for keys (with anyOf, for any one of them), or returns
// nil: with behind, only behind others of its kind waiting for one of them.
// It joins every key's queue at once, so the queues agree on which waiter is
// older; a key's first waiter subscribes to it. The two kinds (lock waiters,
// a semaphore's) take turns apart: each kind's oldest is its front.
func (w *waker) join(keys []string, behind, anyOf bool) *waiter {
	w.mu.Lock()
	defer w.mu.Unlock()
	waited := slices.ContainsFunc(keys, func(k string) bool { return firstOf(w.keys[k], anyOf) != nil })
	if w.l.closed.Load() || (behind && !waited) {
		return nil
	}
	if w.subs == nil {
		w.open()
	}
	wt := &waiter{keys: keys, wake: make(chan struct{}, 1), offers: make(chan offer, 1), anyOf: anyOf}
	for _, k := range keys {
		if len(w.keys[k]) == 0 {
			w.kickSync()
		}
		w.keys[k] = append(w.keys[k], wt)
	}
	return wt
}

// kickSync has one goroutine at a time run sync in the background; w.mu is held.
func (w *waker) kickSync() {
	w.dirty = true
	if !w.syncing && !w.l.closed.Load() {
		w.syncing = true
		w.syncs.Go(w.sync)
	}
}

// due reports whether wt should try now that its backoff ran out: it is
// the oldest waiter of each of its keys, no hand-over to it is under way,
// and no lease of this Locker holds one of its keys (an attempt could only
// be refused; its Unlock wakes the waiter or hands the keys over, and a
// lease lost without one lets the backoff run on). A waiter for any one of
// its keys is refused only while this Locker holds them all.
func (w *waker) due(wt *waiter) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	heldHere := func(k string) bool { return w.held[k] > 0 }
	if wt.anyOf {
		return !wt.reserved && w.frontLocked(wt) && !all(wt.keys, heldHere)
	}
	return !wt.reserved && w.frontLocked(wt) && !slices.ContainsFunc(wt.keys, heldHere)
}

// all reports whether f holds for every element of s.
func all(s []string, f func(string) bool) bool {
	return !slices.ContainsFunc(s, func(k string) bool { return !f(k) })
}

// hold records that a lease of this Locker holds keys.
func (w *waker) hold(keys []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range keys {
		w.held[k]++
	}
}

// unhold records that a lease of this Locker on keys ended.
func (w *waker) unhold(keys []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range keys {
		if w.held[k]--; w.held[k] <= 0 {
			delete(w.held, k)
		}
	}
}

// frontLocked reports, with w.mu held, whether wt is the oldest waiter of
// its kind for each of its keys.
func (w *waker) frontLocked(wt *waiter) bool {
	behind := func(k string) bool { return firstOf(w.keys[k], wt.anyOf) != wt }
	return !slices.ContainsFunc(wt.keys, behind)
}

// firstOf returns the oldest waiter of q of the kind anyOf, or nil.
func firstOf(q []*waiter, anyOf bool) *waiter {
	for _, wt := range q {
		if wt.anyOf == anyOf {
			return wt
		}
	}
	return nil
}

// reserve returns the oldest waiter for exactly keys, reserved for a
// hand-over, or nil when there is none free to take one.
func (w *waker) reserve(keys []string) *waiter {
	w.mu.Lock()
	defer w.mu.Unlock()
	wt := firstOf(w.keys[keys[0]], false)
	if wt == nil || wt.reserved || len(wt.offers) > 0 || !slices.Equal(wt.keys, keys) || !w.frontLocked(wt) {
		return nil
	}
	wt.reserved = true
	return wt
}

// offer gives a reserved waiter the lease handed over to it, unless it is
// gone, and wakes it.
func (w *waker) offer(wt *waiter, o offer) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	wt.reserved = false
	if wt.gone {
		return false
	}
	select {
	case wt.offers <- o:
	default: // never: reserve skips a waiter with an offer
		return false
	}
	signal(wt.wake)
	return true
}

// unreserve ends a reservation that handed nothing over; the waiter tries
// again at once (the keys may be free now).
func (w *waker) unreserve(wt *waiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wt.reserved = false
	signal(wt.wake)
}

// unregister removes a waiter; the last waiter of a key unsubscribes it.
// It returns a lease handed over to the waiter that it did not take.
func (w *waker) unregister(wt *waiter) (offer, bool) {
	if wt == nil {
		return offer{}, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	wt.gone = true
	for _, k := range wt.keys {
		q := w.keys[k]
		i := slices.Index(q, wt)
		if i < 0 { // never: only unregister removes a waiter, once
			continue
		}
		first := firstOf(q, wt.anyOf) == wt
		q = slices.Delete(q, i, i+1)
		if next := firstOf(q, wt.anyOf); first && next != nil {
			// What the oldest heard, and a wake-up it did not use, pass to
			// the next, or a release it was told of would go unused.
			next.heard |= wt.heard
			next.extra += wt.extra
			if len(wt.wake) > 0 {
				signal(next.wake)
			}
		}
		w.keys[k] = q
		if len(q) == 0 {
			delete(w.keys, k)
			w.kickSync()
		}
	}
	select {
	case o := <-wt.offers:
		return o, true
	default:
		return offer{}, false
	}
}

// open starts one Pub/Sub connection and its reader per node; w.mu is held.
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

// sync subscribes every node to the channels that have waiters, and only
// those, until no change is left (an unreachable node's waiters back off).
func (w *waker) sync() {
	for {
		w.mu.Lock()
		if !w.dirty || w.l.closed.Load() {
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
		add, drop := absent(want, w.subscribed), absent(w.subscribed, want)
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

// absent returns the keys of a that b lacks.
func absent(a, b map[string]bool) []string {
	var ks []string
	for k := range a {
		if !b[k] {
			ks = append(ks, k)
		}
	}
	return ks
}

// announced records node's announcement, waking key's oldest waiter of each
// kind on a majority.
func (w *waker) announced(key string, node int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, anyOf := range [2]bool{false, true} {
		wt := firstOf(w.keys[key], anyOf)
		if wt == nil {
			continue
		}
		if node < 64 {
			wt.heard |= 1 << uint(node)
		} else {
			wt.extra++
		}
		if bits.OnesCount64(wt.heard)+wt.extra >= w.l.quorum {
			signal(wt.wake)
		}
	}
}

// released wakes the oldest waiter of each kind of key, which this Locker released.
func (w *waker) released(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, anyOf := range [2]bool{false, true} {
		if wt := firstOf(w.keys[key], anyOf); wt != nil {
			signal(wt.wake)
		}
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

// close ends the subscriptions and goroutines; the closed Locker opens no more.
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
