package quorum_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/quorum"
)

// rig is five real masters on the bed, with direct (fault-free) admin
// clients to inspect them.
type rig struct {
	bed     *testbed.Bed
	nodes   []*testbed.RedisNode
	clients []redis.UniversalClient
	admin   []*redis.Client
}

// shared is the bed of five masters that the package's tests take in
// turn (newRig); TestMain closes it.
var shared = bedtest.Shared{Options: testbed.Options{Redis: 5}}

// newRig is a rig on the shared bed, its nodes running, healed and empty
// (bedtest.Shared), and vouched for: they vote at once. Their uptime is
// the bed's, not the test's: a test about young nodes uses newRigWith.
func newRig(t testing.TB) *rig {
	t.Helper()
	return rigOn(t, shared.Take(t))
}

// newRigWith is a rig on a bed of its own, started with o.
func newRigWith(t testing.TB, o testbed.Options) *rig {
	t.Helper()
	return rigOn(t, bedtest.Start(t, o))
}

// rigOn is a rig on bed, with new clients.
func rigOn(t testing.TB, bed *testbed.Bed) *rig {
	t.Helper()
	r := &rig{bed: bed, nodes: bed.Redis}
	for i := range bed.Redis {
		r.clients = append(r.clients, r.newClient(t, i))
	}
	r.admin = make([]*redis.Client, len(bed.Redis))
	for i := range bed.Redis {
		r.reconnectAdmin(t, i)
	}
	r.warm(t)
	return r
}

// newClient returns a new client of node i through its proxy, closed at
// cleanup: the bed's client options, with socket timeouts long enough that
// the Locker's node timeout (a context deadline) is what cuts a request
// short, even on a loaded machine under the race detector.
func (r *rig) newClient(t testing.TB, i int) *redis.Client {
	o := testbed.ClientOptions(r.nodes[i].Addr())
	o.DialTimeout = slow(10 * time.Second)
	o.ReadTimeout, o.WriteTimeout = slow(10*time.Second), slow(10*time.Second)
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// hookedClients returns new clients of every node (see newClient), each
// with hook h.
func (r *rig) hookedClients(t testing.TB, h redis.Hook) []redis.UniversalClient {
	out := make([]redis.UniversalClient, len(r.nodes))
	for i := range r.nodes {
		c := r.newClient(t, i)
		c.AddHook(h)
		out[i] = c
	}
	return out
}

// heldAnswers is a client hook that counts the script answers 0 (an
// acquire refused because the key is held) and closes reached once it has
// seen n of them: from then on, some attempt has been refused by a majority.
type heldAnswers struct {
	n       int
	mu      sync.Mutex
	seen    int
	reached chan struct{}
}

func newHeldAnswers(n int) *heldAnswers { return &heldAnswers{n: n, reached: make(chan struct{})} }

func (h *heldAnswers) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *heldAnswers) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.see(cmd)
		}
		return err
	}
}

func (h *heldAnswers) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.see(cmd)
		return err
	}
}

// see counts cmd when it is a script call that answered 0.
func (h *heldAnswers) see(cmd redis.Cmder) {
	c, ok := cmd.(*redis.Cmd)
	if !ok || c.Err() != nil || (cmd.Name() != "evalsha" && cmd.Name() != "eval") {
		return
	}
	if v, verr := c.Int64(); verr == nil && v == 0 {
		h.mu.Lock()
		h.seen++
		if h.seen == h.n {
			close(h.reached)
		}
		h.mu.Unlock()
	}
}

// reconnectAdmin (re)opens the direct client of node i: a restarted node may
// listen on another direct address (the proxied Addr stays the same).
func (r *rig) reconnectAdmin(t testing.TB, i int) {
	if old := r.admin[i]; old != nil {
		_ = old.Close()
	}
	// The bed's admin client, with timeouts that hold on a loaded machine:
	// a slow answer to an inspection must not fail the test.
	a := redis.NewClient(&redis.Options{
		Addr:            r.nodes[i].DirectAddr(),
		DialTimeout:     slow(10 * time.Second),
		ReadTimeout:     slow(10 * time.Second),
		WriteTimeout:    slow(10 * time.Second),
		MaxRetries:      -1,
		DisableIdentity: true,
	})
	t.Cleanup(func() { _ = a.Close() })
	r.admin[i] = a
}

// warm vouches for every node as one that has never held a lock, so the
// restart guard lets it vote at once (what an operator does on brand-new
// nodes).
func (r *rig) warm(t testing.TB) {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	for i, a := range r.admin {
		if err := quorum.TrustNode(ctx, a); err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
	}
}

// slow scales a test duration by timeScale.
func slow(d time.Duration) time.Duration { return d * timeScale }

// locker returns a Locker on the rig. Its node timeout is slow(1s) unless
// opts say otherwise: the test machine may be loaded, and only the tests
// about timeouts use short ones.
func (r *rig) locker(t testing.TB, opts ...quorum.Option) *quorum.Locker {
	t.Helper()
	opts = append([]quorum.Option{quorum.WithNodeTimeout(slow(time.Second))}, opts...)
	l, err := quorum.New(r.clients, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// hold locks k for the rest of the test and returns once the token is on
// every node. Lock returns at a majority; the TTL, the node timeout and the
// context are long enough that the remaining nodes' SETs are not cut off,
// and the key does not expire, on a loaded machine.
func (r *rig) hold(t testing.TB, k string) lease.Lease {
	t.Helper()
	l := r.locker(t, quorum.WithTTL(10*time.Minute), quorum.WithNodeTimeout(2*time.Minute))
	le, err := l.Lock(ctxT(t, 5*time.Minute), k)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the holder's token is on every node", func() bool { return r.count(t, k, le.Token()) == 5 })
	return le
}

// values returns the key's value on every node ("" when absent), read
// directly from the servers.
func (r *rig) values(t testing.TB, key string) []string {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	out := make([]string, len(r.admin))
	for i, a := range r.admin {
		v, err := a.Get(ctx, key).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("node %d: get: %v", i, err)
		}
		out[i] = v
	}
	return out
}

// value returns the key's value on node i ("" when absent).
func (r *rig) value(t testing.TB, key string, i int) string {
	t.Helper()
	v, err := r.admin[i].Get(ctxT(t, 10*time.Second), key).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("node %d: get: %v", i, err)
	}
	return v
}

// count returns on how many nodes the key holds v.
func (r *rig) count(t testing.TB, key, v string) int {
	t.Helper()
	n := 0
	for _, got := range r.values(t, key) {
		if got == v {
			n++
		}
	}
	return n
}

// setOn writes key=v directly on the given nodes, as another owner would.
func (r *rig) setOn(t testing.TB, key, v string, ttl time.Duration, nodes ...int) {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	for _, i := range nodes {
		if err := r.admin[i].Set(ctx, key, v, ttl).Err(); err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
	}
}

// partition cuts the given nodes off and heals them when the test ends
// (or earlier through the returned function, which is idempotent).
func (r *rig) partition(t testing.TB, nodes ...int) (heal func()) {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	for _, i := range nodes {
		if err := r.nodes[i].Partition(ctx); err != nil {
			t.Fatalf("partition node %d: %v", i, err)
		}
	}
	var once sync.Once
	heal = func() {
		once.Do(func() {
			for _, i := range nodes {
				if err := r.nodes[i].Heal(context.Background()); err != nil {
					t.Errorf("heal node %d: %v", i, err)
				}
			}
			r.settle(t, nodes...)
		})
	}
	t.Cleanup(heal)
	return heal
}

// settle waits until the clients of the given nodes answer again. The proxy
// closes connections that lived through a fault shortly after it ends; the
// pool discards them once it sees them closed, and a request that picked
// one just before gets EOF. Real callers retry (Unlock is safe to retry);
// tests that count node answers settle first.
func (r *rig) settle(t testing.TB, nodes ...int) {
	t.Helper()
	time.Sleep(50 * time.Millisecond)
	for _, i := range nodes {
		ok := 0
		for try := 0; ok < 3; try++ {
			if try > 100 {
				t.Fatalf("node %d does not answer after the fault", i)
			}
			if r.clients[i].Ping(ctxT(t, slow(time.Second))).Err() == nil {
				ok++
			} else {
				ok = 0
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
}

// pause freezes the given nodes and resumes them when the test ends (or
// earlier through the returned function).
func (r *rig) pause(t testing.TB, nodes ...int) (resume func()) {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	for _, i := range nodes {
		if err := r.nodes[i].Pause(ctx); err != nil {
			t.Fatalf("pause node %d: %v", i, err)
		}
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			for _, i := range nodes {
				if err := r.nodes[i].Resume(context.Background()); err != nil {
					t.Errorf("resume node %d: %v", i, err)
				}
			}
			r.settle(t, nodes...)
		})
	}
	t.Cleanup(resume)
	return resume
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond every 10ms until it holds or slow(d) passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	d = slow(d)
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitClosed fails the test when ch is not closed within slow(d).
func waitClosed(t testing.TB, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	d = slow(d)
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("not within %v: %s", d, what)
	}
}

// recorder is an Observer that keeps every event.
type recorder struct {
	mu       sync.Mutex
	acquires []lease.AcquireEvent
	nodeErrs []lease.NodeEvent
	extends  []lease.ExtendEvent
	releases []lease.ReleaseEvent
	lost     []lease.LostEvent
}

func (r *recorder) ObserveAcquire(e lease.AcquireEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.acquires = append(r.acquires, e)
}

func (r *recorder) ObserveNodeError(e lease.NodeEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nodeErrs = append(r.nodeErrs, e)
}

func (r *recorder) ObserveExtend(e lease.ExtendEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.extends = append(r.extends, e)
}

func (r *recorder) ObserveRelease(e lease.ReleaseEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.releases = append(r.releases, e)
}

func (r *recorder) ObserveLost(e lease.LostEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lost = append(r.lost, e)
}

func (r *recorder) snapshot() recorder {
	r.mu.Lock()
	defer r.mu.Unlock()
	return recorder{
		acquires: append([]lease.AcquireEvent(nil), r.acquires...),
		nodeErrs: append([]lease.NodeEvent(nil), r.nodeErrs...),
		extends:  append([]lease.ExtendEvent(nil), r.extends...),
		releases: append([]lease.ReleaseEvent(nil), r.releases...),
		lost:     append([]lease.LostEvent(nil), r.lost...),
	}
}

// released sums the Released counts of every release event.
func (r *recorder) released() int {
	s := r.snapshot()
	n := 0
	for _, e := range s.releases {
		n += e.Released
	}
	return n
}

// quorumGoroutines returns the stacks of live goroutines that run code of
// package quorum (not of its tests), but for those that live as long as
// their Locker while they have nothing to do: the node workers waiting for
// requests and the readers of the release announcements (Close ends them;
// the test's goleak check sees any that outlive it).
func quorumGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		idle := strings.Contains(g, "quorum.(*waker).read") ||
			(strings.Contains(g, "quorum.(*nodeWorker).loop") && !strings.Contains(g, "quorum.(*nodeWorker).send"))
		if strings.Contains(g, "quorumlock/quorumlock/quorum.") && !idle {
			out = append(out, g)
		}
	}
	return out
}

// noQuorumGoroutines fails when goroutines of package quorum are still
// running after grace (which lets goroutines that are just returning end).
func noQuorumGoroutines(t testing.TB, grace time.Duration) {
	t.Helper()
	deadline := time.Now().Add(slow(grace))
	for {
		left := quorumGoroutines()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines of package quorum still running:\n%s", len(left), strings.Join(left, "\n\n"))
		}
		time.Sleep(time.Millisecond)
	}
}

func key(t testing.TB) string { return fmt.Sprintf("lock:%s", t.Name()) }
