package quorum

import (
	"context"
	"math/bits"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ReleaseChannelPrefix starts the Pub/Sub channel on which every node
// announces a release of key: ReleaseChannelPrefix + key. The release
// script publishes on it after it deleted the key, and Lock waiters
// subscribe to it, so that they retry the moment the key is free instead
// of at the end of their backoff.
const ReleaseChannelPrefix = "quorumlock:released:"

// waker wakes the Lock calls of this Locker that wait for a key when a
// node announces its release. It keeps one Pub/Sub connection per node,
// opened at the first wait, and subscribes each node to the channels of
// the keys that have waiters. Waiters of a key are served oldest first: the
// one that has waited longest is woken once a majority of the nodes have
// announced a release since its last attempt (each node announces after it
// deleted the key there, so an attempt before that would be refused), and
// the others keep waiting. Their backoff still runs, so a lost message
// costs latency, never progress.
type waker struct {
	l *Locker

	mu     sync.Mutex
	keys   map[string]*waitQueue
	subs   []*redis.PubSub // per node; nil until the first wait
	closed bool

	// syncMu orders the SUBSCRIBE and UNSUBSCRIBE commands: each sync
	// sends what the waiters want now, whatever the previous ones sent.
	syncMu     sync.Mutex
	subscribed map[string]bool // channels sent to every node, under syncMu

	readers sync.WaitGroup

	// dirty says the subscriptions lag the waiters; syncing that the
	// goroutine of kickSync runs (both under mu); syncs counts it.
	dirty, syncing bool
	syncs          sync.WaitGroup

	// confirmed counts, per channel, the nodes that confirmed the
	// subscription (for tests and diagnostics).
	confirmed map[string]int
}

type waitQueue struct {
	waiters []*waiter // oldest first
}

// waiter is one Lock call waiting for a key.
type waiter struct {
	key  string
	wake chan struct{} // capacity 1: a wake-up while it is not waiting is kept

	// heard is the set of nodes that announced a release since the
	// waiter's last attempt (nodes 0..63; others count in extra), under
	// the waker's mu.
	heard uint64
	extra int
}

func newWaker(l *Locker) *waker {
	return &waker{l: l, keys: map[string]*waitQueue{}, subscribed: map[string]bool{}, confirmed: map[string]int{}}
}

// register queues a waiter for key and makes sure the nodes announce the
// key's releases to this Locker. It returns nil once the Locker is closed.
func (w *waker) register(key string) *waiter {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	if w.subs == nil {
		w.open()
	}
	q := w.keys[key]
	if q == nil {
		q = &waitQueue{}
		w.keys[key] = q
	}
	wt := &waiter{key: key, wake: make(chan struct{}, 1)}
	q.waiters = append(q.waiters, wt)
	first := len(q.waiters) == 1
	w.mu.Unlock()
	if first {
		w.kickSync()
	}
	return wt
}

// kickSync brings the subscriptions up to date in the background, off the
// callers' path: a node that does not answer delays no Lock. One goroutine
// at a time does it, again while there are changes it has not sent.
func (w *waker) kickSync() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.dirty = true
	if w.syncing {
		w.mu.Unlock()
		return
	}
	w.syncing = true
	w.syncs.Add(1)
	w.mu.Unlock()
	go func() {
		defer w.syncs.Done()
		for {
			w.mu.Lock()
			if !w.dirty || w.closed {
				w.syncing = false
				w.mu.Unlock()
				return
			}
			w.dirty = false
			w.mu.Unlock()
			w.sync()
		}
	}()
}

// join queues a waiter for key behind those of this Locker already
// waiting for it, or returns nil when there are none: a new Lock call must
// not overtake them.
func (w *waker) join(key string) *waiter {
	w.mu.Lock()
	q := w.keys[key]
	if w.closed || q == nil || len(q.waiters) == 0 {
		w.mu.Unlock()
		return nil
	}
	wt := &waiter{key: key, wake: make(chan struct{}, 1)}
	q.waiters = append(q.waiters, wt)
	w.mu.Unlock()
	return wt
}

// front reports whether wt is the oldest waiter of its key.
func (w *waker) front(wt *waiter) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.keys[wt.key]
	return q != nil && len(q.waiters) > 0 && q.waiters[0] == wt
}

// unregister removes a waiter; the last waiter of a key unsubscribes it.
func (w *waker) unregister(wt *waiter) {
	if wt == nil {
		return
	}
	w.mu.Lock()
	q := w.keys[wt.key]
	last := false
	if q != nil {
		for i, o := range q.waiters {
			if o == wt {
				q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
				if i == 0 && len(q.waiters) > 0 {
					// The oldest leaves (it got the key, or gave up): what
					// it heard, and a wake-up it did not use, pass to the
					// next, or a release it was told of would go unused.
					next := q.waiters[0]
					next.heard |= wt.heard
					next.extra += wt.extra
					if len(wt.wake) > 0 {
						select {
						case next.wake <- struct{}{}:
						default:
						}
					}
				}
				break
			}
		}
		if len(q.waiters) == 0 {
			delete(w.keys, wt.key)
			last = true
		}
	}
	w.mu.Unlock()
	if last {
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
		w.readers.Add(1)
		go w.read(i, ps)
	}
}

// sync subscribes every node to the channels that have waiters and
// unsubscribes the others. A node that cannot be reached is left as it is:
// its waiters fall back to their backoff.
func (w *waker) sync() {
	w.syncMu.Lock()
	defer w.syncMu.Unlock()
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	var add, drop []string
	for k := range w.keys {
		if ch := ReleaseChannelPrefix + k; !w.subscribed[ch] {
			add = append(add, ch)
		}
	}
	for ch := range w.subscribed {
		if _, ok := w.keys[strings.TrimPrefix(ch, ReleaseChannelPrefix)]; !ok {
			drop = append(drop, ch)
		}
	}
	subs := w.subs
	w.mu.Unlock()
	if len(add) == 0 && len(drop) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.l.cfg.nodeTimeout)
	defer cancel()
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
	for _, ch := range add {
		w.subscribed[ch] = true
	}
	for _, ch := range drop {
		delete(w.subscribed, ch)
	}
}

// read delivers node i's release messages until its connection closes.
func (w *waker) read(i int, ps *redis.PubSub) {
	defer w.readers.Done()
	for m := range ps.ChannelWithSubscriptions() {
		switch m := m.(type) {
		case *redis.Message:
			w.wake(strings.TrimPrefix(m.Channel, ReleaseChannelPrefix), i)
		case *redis.Subscription:
			w.mu.Lock()
			switch m.Kind {
			case "subscribe":
				w.confirmed[m.Channel]++
			case "unsubscribe":
				if w.confirmed[m.Channel]--; w.confirmed[m.Channel] <= 0 {
					delete(w.confirmed, m.Channel)
				}
			}
			w.mu.Unlock()
		}
	}
}

// wake records that node announced a release of key, and wakes the oldest
// waiter once a majority of the nodes have since its last attempt.
func (w *waker) wake(key string, node int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.keys[key]
	if q == nil || len(q.waiters) == 0 {
		return
	}
	wt := q.waiters[0]
	if node < 64 {
		wt.heard |= 1 << uint(node)
	} else {
		wt.extra++
	}
	if bits.OnesCount64(wt.heard)+wt.extra < w.l.quorum {
		return
	}
	select {
	case wt.wake <- struct{}{}:
	default: // it has a wake-up already
	}
}

// released wakes the oldest waiter of key at once: this Locker's own
// Unlock saw a majority release it, so there is no announcement to wait
// for.
func (w *waker) released(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if q := w.keys[key]; q != nil && len(q.waiters) > 0 {
		select {
		case q.waiters[0].wake <- struct{}{}:
		default:
		}
	}
}

// attempting forgets the announcements a waiter heard: the attempt it is
// about to make sees those releases.
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

// wait sleeps up to d, until a release of the waiter's key is announced
// or ctx ends. It reports whether ctx is still live, and whether a release
// message ended the wait.
func (wt *waiter) wait(ctx context.Context, d time.Duration) (live, woken bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-wt.wake:
		return true, true
	case <-t.C:
		return true, false
	case <-ctx.Done():
		return false, false
	}
}

// close ends every subscription and waits for the readers.
func (w *waker) close() {
	w.mu.Lock()
	w.closed = true
	subs := w.subs
	w.mu.Unlock()
	w.syncs.Wait() // a sync under way ends within a node timeout
	for _, ps := range subs {
		_ = ps.Close()
	}
	w.readers.Wait()
}

// confirmedBy returns how many nodes confirmed the subscription to key's
// release channel.
func (w *waker) confirmedBy(key string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.confirmed[ReleaseChannelPrefix+key]
}
