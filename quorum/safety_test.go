package quorum_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/quorum"
)

// withLatency delays every reply of every node by d until the test ends
// (or the returned function runs).
func (r *rig) withLatency(t *testing.T, d time.Duration) (remove func()) {
	t.Helper()
	for i, n := range r.nodes {
		if err := n.AddLatency(ctxT(t, 30*time.Second), d); err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
	}
	var once sync.Once
	remove = func() {
		once.Do(func() {
			for i, n := range r.nodes {
				if err := n.AddLatency(context.Background(), 0); err != nil {
					t.Errorf("node %d: %v", i, err)
				}
			}
		})
	}
	t.Cleanup(remove)
	return remove
}

// A lease ends at start + TTL - drift allowance, start being taken before
// the first request left: the time the vote took is not subtracted again.
func TestUntilCountsTheVoteOnce(t *testing.T) {
	r := newRig(t)
	const ttl = 5 * time.Minute
	allowance := time.Duration(float64(ttl)*quorum.DefaultDriftFactor) + 2*time.Millisecond
	l := r.locker(t, quorum.WithTTL(ttl))
	k := key(t)
	if _, err := l.TryLock(ctxT(t, 10*time.Second), k+":warm"); err != nil {
		t.Fatal(err)
	}
	// Every answer takes at least 100ms, so a vote takes that long.
	r.withLatency(t, 100*time.Millisecond)
	bracket := func(what string, until, before, after time.Time) {
		t.Helper()
		lo, hi := before.Add(ttl-allowance), after.Add(ttl-allowance)
		if until.Before(lo) || until.After(hi) {
			t.Fatalf("%s: Until is %v after the call started, want within [%v, %v]",
				what, until.Sub(before), ttl-allowance, after.Sub(before)+ttl-allowance)
		}
	}
	before := time.Now()
	le, err := l.Lock(ctxT(t, 10*time.Second), k)
	after := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	if after.Sub(before) < 100*time.Millisecond {
		t.Fatalf("the vote took %v: the latency was not in effect", after.Sub(before))
	}
	bracket("Lock", le.Until(), before, after)
	before = time.Now()
	err = le.Extend(ctxT(t, 10*time.Second), ttl)
	after = time.Now()
	if err != nil {
		t.Fatal(err)
	}
	bracket("Extend", le.Until(), before, after)
	_ = le.Unlock(ctxT(t, 10*time.Second))
}

// An Extend to a shorter TTL whose context ends before the answers come
// may have been applied by the nodes: the lease must not claim validity
// past what they may have applied, so it never overlaps the next holder.
func TestCancelledExtendNeverOverstatesTheLease(t *testing.T) {
	r := newRig(t)
	ttl, short := slow(6*time.Second), slow(time.Second)
	l := r.locker(t, quorum.WithTTL(ttl), quorum.WithNodeTimeout(slow(200*time.Millisecond)))
	k := key(t)
	le, err := l.Lock(ctxT(t, 10*time.Second), k)
	if err != nil {
		t.Fatal(err)
	}
	// Load the extend script on every node first, so that the delayed
	// extension below is applied at once and only its answers are late.
	if err := le.Extend(ctxT(t, 10*time.Second), ttl); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the token is on every node", func() bool { return r.count(t, k, le.Token()) == 5 })
	remove := r.withLatency(t, slow(300*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Millisecond)
	start := time.Now()
	err = le.Extend(ctx, short)
	after := time.Now()
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, lease.ErrExtendUnconfirmed) {
		t.Fatalf("got %v, want context.DeadlineExceeded and ErrExtendUnconfirmed", err)
	}
	before := time.Until(le.Until())
	// The extension started between start and after: its end is at most
	// after + short - drift allowance.
	if u := le.Until(); u.After(after.Add(short)) {
		t.Fatalf("Until is %v after the unclear extension to %v returned", u.Sub(after), short)
	}
	t.Logf("unclear extension to %v: %v; Until now %v after its start", short, err, le.Until().Sub(start))
	remove()
	// Once the nodes dropped the key, another Locker takes it: by then
	// the first lease must no longer say it is valid.
	eventually(t, 30*time.Second, "a majority dropped the key", func() bool { return r.count(t, k, "") >= 3 })
	other := r.locker(t, quorum.WithTTL(ttl))
	var second lease.Lease
	for try := 0; second == nil; try++ {
		second, err = other.TryLock(ctxT(t, 10*time.Second), k)
		if err != nil && try == 20 {
			t.Fatalf("the second Locker never got the key: %v", err)
		}
	}
	if now := time.Now(); now.Before(le.Until()) && le.Err() == nil {
		t.Fatalf("two valid leases: the first still claims %v more", le.Until().Sub(now))
	}
	t.Logf("second holder after %v; the first lease had ended %v before (it had %v left after the extension)",
		time.Since(start), time.Since(le.Until()), before)
	_ = second.Unlock(ctxT(t, 10*time.Second))
}

// Do reports a lease whose token vanished from a majority while fn ran,
// even when no extension ran to notice: the final Unlock finds out.
func TestDoReportsALostLease(t *testing.T) {
	r := newRig(t)
	// The watchdog's first extension is far away.
	l := r.locker(t, quorum.WithTTL(5*time.Minute))
	forget := func(t *testing.T, k, token string) {
		eventually(t, time.Minute, "the token is on every node", func() bool { return r.count(t, k, token) == 5 })
		for _, i := range []int{0, 2, 4} { // restarted or evicted
			if err := r.admin[i].Del(ctxT(t, 10*time.Second), k).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	k := key(t)
	err := l.Do(ctxT(t, time.Minute), k, func(ctx context.Context, le lease.Lease) error {
		forget(t, k, le.Token())
		return nil
	})
	if !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("Do: %v, want ErrLeaseLost", err)
	}
	boom := errors.New("fn failed")
	err = l.Do(ctxT(t, time.Minute), k+":2", func(ctx context.Context, le lease.Lease) error {
		forget(t, k+":2", le.Token())
		return boom
	})
	if !errors.Is(err, lease.ErrLeaseLost) || !errors.Is(err, boom) {
		t.Fatalf("Do: %v, want fn's error joined with ErrLeaseLost", err)
	}
	// A lease that was kept reports nothing.
	if err := l.Do(ctxT(t, time.Minute), k+":3", func(context.Context, lease.Lease) error { return nil }); err != nil {
		t.Fatalf("Do with the lease kept: %v", err)
	}
}

// One failed extension round with most of the validity left is retried;
// fn keeps running when a retry gets through.
func TestDoRetriesAnUnclearExtension(t *testing.T) {
	r := newRig(t)
	rec := &recorder{}
	l := r.locker(t, quorum.WithTTL(slow(4*time.Second)), quorum.WithNodeTimeout(slow(200*time.Millisecond)), quorum.WithObserver(rec))
	k := key(t)
	unconfirmed := func() int {
		n := 0
		for _, e := range rec.snapshot().extends {
			if errors.Is(e.Err, lease.ErrExtendUnconfirmed) {
				n++
			}
		}
		return n
	}
	confirmed := func() int {
		n := 0
		for _, e := range rec.snapshot().extends {
			if e.Err == nil {
				n++
			}
		}
		return n
	}
	err := l.Do(ctxT(t, time.Minute), k, func(ctx context.Context, le lease.Lease) error {
		heal := r.partition(t, 0, 2, 4)
		eventually(t, 10*time.Second, "an extension round failed", func() bool { return unconfirmed() > 0 })
		ok := confirmed()
		heal()
		eventually(t, 10*time.Second, "a retried extension got through", func() bool { return confirmed() > ok })
		if err := context.Cause(ctx); err != nil {
			return fmt.Errorf("fn was cancelled: %w", err)
		}
		t.Logf("%d unconfirmed extension rounds, then %d confirmed; fn kept running", unconfirmed(), confirmed()-ok)
		return nil
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
}

// Clients that let a request outlive its context (no context timeouts,
// blocking reads, retries) still see every node call end at the node
// timeout: Lock, Unlock and Do return, and no goroutine is left once the
// Locker is closed.
func TestClientsThatIgnoreDeadlines(t *testing.T) {
	r := newRig(t)
	var clients []redis.UniversalClient
	for _, n := range r.nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr(), DisableIdentity: true, ReadTimeout: -1, WriteTimeout: -1}) // MaxRetries: 3
		t.Cleanup(func() { _ = c.Close() })
		clients = append(clients, c)
	}
	l, err := quorum.New(clients, quorum.WithTTL(slow(10*time.Second)), quorum.WithNodeTimeout(slow(300*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	k := key(t)
	// Connections and scripts first, then cut two nodes off.
	if err := l.Do(ctxT(t, time.Minute), k+":warm", func(context.Context, lease.Lease) error { return nil }); err != nil {
		t.Fatal(err)
	}
	r.partition(t, 3, 4)
	done := make(chan error, 1)
	go func() {
		done <- l.Do(ctxT(t, time.Minute), k, func(context.Context, lease.Lease) error { return nil })
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Do: %v", err)
		}
	case <-time.After(slow(20 * time.Second)):
		t.Fatal("Do did not return: a node call outlived the node timeout")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	noQuorumGoroutines(t, 50*time.Millisecond)
}

// releaseGate is a client hook that holds every release request until the
// gate opens (or the request's context ends).
type releaseGate struct {
	sha      string
	open     chan struct{}
	started  atomic.Int32
	finished atomic.Int64 // UnixNano of the first release that passed
}

func (g *releaseGate) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessPipelineHook holds a batch (the node workers pipeline concurrent
// requests) that holds a release.
func (g *releaseGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if g.hold(ctx, cmd) {
				break
			}
		}
		return next(ctx, cmds)
	}
}

func (g *releaseGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		g.hold(ctx, cmd)
		return next(ctx, cmd)
	}
}

// hold waits for the gate when cmd is a release.
func (g *releaseGate) hold(ctx context.Context, cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) < 2 || fmt.Sprint(args[1]) != g.sha {
		return false
	}
	g.started.Add(1)
	select {
	case <-g.open:
	case <-ctx.Done():
	}
	g.finished.CompareAndSwap(0, time.Now().UnixNano())
	return true
}

// A failed attempt is undone in the background: Lock returns at the
// verdict, not after the release of the nodes that granted.
func TestFailedAttemptReturnsBeforeItsRelease(t *testing.T) {
	r := newRig(t)
	gate := &releaseGate{sha: redis.NewScript(quorum.ReleaseSource).Hash(), open: make(chan struct{})}
	// The TTL outlives the test: the keys on nodes 0 and 1 must go by the
	// release, not by expiry.
	l, err := quorum.New(r.hookedClients(t, gate), quorum.WithNodeTimeout(slow(time.Second)), quorum.WithTTL(5*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	k := key(t)
	r.setOn(t, k, "other-owner", 10*time.Minute, 2, 3, 4)
	_, err = l.TryLock(ctxT(t, 10*time.Second), k)
	returned := time.Now()
	if !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("got %v, want ErrNotAcquired", err)
	}
	eventually(t, 10*time.Second, "the undo started", func() bool { return gate.started.Load() > 0 })
	if f := gate.finished.Load(); f != 0 && time.Unix(0, f).Before(returned) {
		t.Fatal("TryLock returned only after the release of the granted nodes")
	}
	close(gate.open)
	eventually(t, 10*time.Second, "the granted nodes are released", func() bool {
		return slices.Equal(r.values(t, k)[:2], []string{"", ""})
	})
}

// uptimes returns every node's uptime in whole seconds.
func (r *rig) uptimes(t *testing.T) []int64 {
	t.Helper()
	var out []int64
	for i, a := range r.admin {
		s, err := a.Info(ctxT(t, 10*time.Second), "server").Result()
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		var up int64 = -1
		for _, line := range strings.Split(s, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "uptime_in_seconds:"); ok {
				up, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		out = append(out, up)
	}
	return out
}

// The restart guard follows Redlock's delayed restart: a node that
// restarted votes only once it has been up for the window, whatever data
// it came back with; nodes up for longer than that vote at once.
func TestRestartGuard(t *testing.T) {
	const ttl = 5 * time.Minute // the first lease outlives every step

	// A node restarted from an older RDB snapshot keeps the marker and
	// loses the lock key. The guard on refuses its vote; off (the negative
	// control), the lock is granted twice.
	for _, guard := range []bool{true, false} {
		t.Run(fmt.Sprintf("OldSnapshot/guard=%v", guard), func(t *testing.T) {
			r := newRigWith(t, testbed.Options{Redis: 5, AppendFsync: testbed.FsyncOff})
			for i, a := range r.admin {
				if err := a.Save(ctxT(t, 30*time.Second)).Err(); err != nil {
					t.Fatalf("node %d: SAVE: %v", i, err)
				}
			}
			opts := []quorum.Option{quorum.WithTTL(ttl), quorum.WithAmnesiaGuard(guard)}
			first, second := r.locker(t, opts...), r.locker(t, opts...)
			k := key(t)
			le := holdOnExactMajority(t, r, first, k)
			ctx := ctxT(t, time.Minute)
			if err := r.nodes[2].Kill(ctx); err != nil {
				t.Fatal(err)
			}
			if err := r.nodes[2].Restart(ctx, true); err != nil {
				t.Fatal(err)
			}
			r.reconnectAdmin(t, 2)
			if r.value(t, k, 2) != "" || r.value(t, quorum.BootMarkerKey, 2) == "" {
				t.Fatalf("node 2 did not come back from its snapshot: key %q, marker %q", r.value(t, k, 2), r.value(t, quorum.BootMarkerKey, 2))
			}
			var double lease.Lease
			warming := false
			for i := 0; i < 10 && double == nil; i++ {
				got, err := second.TryLock(ctxT(t, 10*time.Second), k)
				if err == nil {
					double = got
					break
				}
				warming = warming || errors.Is(err, quorum.ErrNodeWarming)
				time.Sleep(50 * time.Millisecond)
			}
			t.Logf("guard=%v: node 2 back from its snapshot without the key; second locker: double grant %v, warming answers %v", guard, double != nil, warming)
			if !guard {
				if double == nil {
					t.Fatal("no double grant without the guard: the snapshot scenario was not reproduced")
				}
				if now := time.Now(); !now.Before(le.Until()) || !now.Before(double.Until()) {
					t.Fatal("the two leases were not valid at the same time")
				}
				return
			}
			if double != nil {
				t.Fatalf("double grant after a restart from a snapshot: values %q", r.values(t, k))
			}
			if !warming {
				t.Fatal("node 2 never answered warming")
			}
			if le.Err() != nil {
				t.Fatalf("first lease: %v", le.Err())
			}
		})
	}

	// Declared durable (appendfsync always), a node that restarted with
	// its data votes at once; by default it waits out the window.
	t.Run("DurableRestartWithData", func(t *testing.T) {
		r := newRig(t)
		durable := r.locker(t, quorum.WithTTL(ttl), quorum.WithDurableNodes(true))
		plain := r.locker(t, quorum.WithTTL(ttl))
		ctx := ctxT(t, time.Minute)
		if err := r.nodes[2].Restart(ctx, true); err != nil {
			t.Fatal(err)
		}
		r.reconnectAdmin(t, 2)
		if r.value(t, quorum.BootMarkerKey, 2) == "" {
			t.Fatal("node 2 lost its marker with appendfsync always")
		}
		r.settle(t, 2)
		k := key(t)
		le, err := durable.Lock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, "the restarted durable node votes", func() bool { return r.value(t, k, 2) == le.Token() })
		_ = le.Unlock(ctx)
		le, err = plain.Lock(ctx, k+":plain")
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, "every other node holds the key", func() bool { return r.count(t, k+":plain", le.Token()) == 4 })
		if got := r.value(t, k+":plain", 2); got != "" {
			t.Fatalf("the restarted node voted inside the window without the durable declaration: %q", got)
		}
		_ = le.Unlock(ctx)
	})

	// First contact with nodes that have been up for longer than the
	// window grants at once, with no marker at all.
	t.Run("FirstContactWithLongRunningNodes", func(t *testing.T) {
		r := newRig(t)
		window := slow(2 * time.Second)
		for i, a := range r.admin {
			if err := a.Del(ctxT(t, 10*time.Second), quorum.BootMarkerKey).Err(); err != nil {
				t.Fatalf("node %d: %v", i, err)
			}
		}
		need := int64(window/time.Second) + 2
		eventually(t, time.Minute, "every node up for longer than the window", func() bool {
			return slices.Min(r.uptimes(t)) >= need
		})
		l := r.locker(t, quorum.WithTTL(window), quorum.WithNodeTimeout(slow(500*time.Millisecond)))
		le, err := l.TryLock(ctxT(t, 10*time.Second), key(t))
		if err != nil {
			t.Fatalf("first contact: %v", err)
		}
		_ = le.Unlock(ctxT(t, 10*time.Second))
	})

	// Young nodes nobody vouched for stay out of the vote until their
	// uptime reaches the window, then Lock gets through.
	t.Run("YoungNodesWarmUpThenVote", func(t *testing.T) {
		r := newRigWith(t, testbed.Options{Redis: 5}) // young nodes: a bed of its own
		for i, a := range r.admin {
			if err := a.Del(ctxT(t, 10*time.Second), quorum.BootMarkerKey).Err(); err != nil {
				t.Fatalf("node %d: %v", i, err)
			}
		}
		// A window five seconds past the oldest node's uptime, and long
		// enough for the node timeout.
		nodeTimeout := slow(time.Second) // a first call on new connections
		// must answer "warming", not time out, on a loaded machine
		window := max(time.Duration(slices.Max(r.uptimes(t))+5)*time.Second, 5*nodeTimeout)
		l := r.locker(t, quorum.WithTTL(window), quorum.WithNodeTimeout(nodeTimeout), quorum.WithMaxWait(slow(time.Minute)))
		k := key(t)
		_, err := l.TryLock(ctxT(t, 10*time.Second), k)
		var qe *quorum.QuorumError
		if !errors.Is(err, lease.ErrQuorumUnavailable) || !errors.As(err, &qe) || len(qe.Nodes) < 3 {
			t.Fatalf("got %v, want a majority of warming nodes", err)
		}
		for _, ne := range qe.Nodes {
			if !errors.Is(ne, quorum.ErrNodeWarming) {
				t.Fatalf("node error %v, want ErrNodeWarming", ne)
			}
		}
		if got := r.count(t, k, ""); got != 5 {
			t.Fatal("a warming node wrote the lock key")
		}
		le, err := l.Lock(ctxT(t, slow(2*time.Minute)), k)
		if err != nil {
			t.Fatal(err)
		}
		// The nodes that voted were past the window: a majority is.
		ups := r.uptimes(t)
		slices.Sort(ups)
		if third := ups[len(ups)-3]; time.Duration(third-1)*time.Second < window {
			t.Fatalf("granted with uptimes %v, inside the %v window", ups, window)
		}
		_ = le.Unlock(ctxT(t, 10*time.Second))
	})
}

// holdAcquire is a client hook that keeps every acquire request (the
// script with two keys: the lock and the boot marker) from leaving until
// let is closed, and logs the script calls in the order they end (a
// request sent while another is held ends first).
type holdAcquire struct {
	let chan struct{}
	mu  sync.Mutex
	log []string
}

// acquireOrRelease names a script call: acquire (by its SHA-1, or an EVAL
// of its source), else release.
func acquireOrRelease(cmd redis.Cmder) string {
	a := cmd.Args()
	if len(a) > 1 && (quorum.ScriptNames[fmt.Sprint(a[1])] == "acquire" || fmt.Sprint(a[1]) == quorum.AcquireSource) {
		return "acquire"
	}
	return "release"
}

func (h *holdAcquire) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessPipelineHook treats a batch like its commands one after another:
// a batch with an acquire is held, and its commands are logged in order.
func (h *holdAcquire) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var what []string
		for _, cmd := range cmds {
			if cmd.Name() != "evalsha" && cmd.Name() != "eval" {
				continue
			}
			what = append(what, acquireOrRelease(cmd))
		}
		if slices.Contains(what, "acquire") {
			select {
			case <-h.let:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		err := next(ctx, cmds)
		h.mu.Lock()
		h.log = append(h.log, what...)
		h.mu.Unlock()
		return err
	}
}

func (h *holdAcquire) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "evalsha" && cmd.Name() != "eval" {
			return next(ctx, cmd)
		}
		what := acquireOrRelease(cmd)
		if what == "acquire" {
			select {
			case <-h.let:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		err := next(ctx, cmd)
		if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			return err // go-redis sends the script itself next
		}
		h.mu.Lock()
		h.log = append(h.log, what)
		h.mu.Unlock()
		return err
	}
}

func (h *holdAcquire) sent() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.log)
}

// TestUnlockReturnsAtTheMajority: a node whose acquire request is late
// delays neither Lock nor Unlock, and its release leaves only after its
// own late SET, so the key is not left behind on it. On the old Unlock,
// which waited for every acquire answer and then every release answer,
// the Unlock below blocks on the held node and reports it unconfirmed.
func TestUnlockReturnsAtTheMajority(t *testing.T) {
	r := newRig(t)
	hold := &holdAcquire{let: make(chan struct{})}
	clients := make([]redis.UniversalClient, len(r.nodes))
	for i := range r.nodes {
		c := r.newClient(t, i)
		if i == 4 {
			c.AddHook(hold)
		}
		clients[i] = c
	}
	l, err := quorum.New(clients, quorum.WithTTL(5*time.Minute), quorum.WithNodeTimeout(slow(20*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var once sync.Once
	let := func() { once.Do(func() { close(hold.let) }) }
	defer let()
	k := key(t)
	le, err := l.Lock(ctxT(t, 10*time.Second), k)
	if err != nil {
		t.Fatal(err)
	}
	if err := le.Unlock(ctxT(t, 10*time.Second)); err != nil {
		t.Fatalf("unlock while one node's acquire is still out: %v", err)
	}
	if got := hold.sent(); len(got) != 0 {
		t.Fatalf("node 4 was sent %v while its acquire was held", got)
	}
	free := 0
	for i := range 4 {
		if r.value(t, k, i) == "" {
			free++
		}
	}
	if free < 3 {
		t.Fatalf("Unlock returned with the key free on %d nodes, not a majority", free)
	}
	// The late SET lands; the release follows it, never ahead of it.
	let()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := hold.sent(); !slices.Equal(got, []string{"acquire", "release"}) {
		t.Fatalf("node 4 was sent %v, want the acquire, then the release", got)
	}
	if v := r.value(t, k, 4); v != "" {
		t.Fatalf("the late SET left %q on node 4", v)
	}
}

// TestCancelledUnlockStillReleases: the release requests do not hang on
// the caller's context. An Unlock whose context is already cancelled
// answers at once (with the context's error, unless a majority's answers
// happened to be in already), and the key is released on every node all
// the same (a "defer cancel()" right after Unlock must not strand the
// nodes outside the majority either).
func TestCancelledUnlockStillReleases(t *testing.T) {
	r := newRig(t)
	l := r.locker(t, quorum.WithTTL(5*time.Minute))
	k := key(t)
	le, err := l.Lock(ctxT(t, 10*time.Second), k)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = le.Unlock(ctx)
	if err != nil && (!errors.Is(err, context.Canceled) || !errors.Is(err, lease.ErrUnlockUnconfirmed)) {
		t.Fatalf("Unlock with a cancelled context: %v, want context.Canceled and ErrUnlockUnconfirmed", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := r.count(t, k, ""); got != 5 {
		t.Fatalf("key left on %d nodes: %q", 5-got, r.values(t, k))
	}
	// A retry after that knows every node answered.
	if err := le.Unlock(context.Background()); err != nil {
		t.Fatalf("retry: %v", err)
	}
}

// TestRetriedUnlockCountsEarlierReleases: a retried Unlock may ask nodes
// whose first release is still out. Their second answer is "not ours"
// (the first one deleted the token), and that must not make a released
// lease look lost. Here the first Unlock's context is cancelled with every
// release held in a hook, the retry queues behind them, and then all go:
// three nodes released and two belong to another owner, so the retry
// reports success, where counting the retry's own answers said
// lease.ErrLeaseLost.
func TestRetriedUnlockCountsEarlierReleases(t *testing.T) {
	r := newRig(t)
	gate := &releaseGate{sha: redis.NewScript(quorum.ReleaseSource).Hash(), open: make(chan struct{})}
	l, err := quorum.New(r.hookedClients(t, gate), quorum.WithNodeTimeout(slow(10*time.Second)), quorum.WithTTL(5*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var once sync.Once
	open := func() { once.Do(func() { close(gate.open) }) }
	defer open()
	k := key(t)
	le, err := l.Lock(ctxT(t, 10*time.Second), k)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the lease is on every node", func() bool { return r.count(t, k, le.Token()) == 5 })
	r.setOn(t, k, "other-owner", 10*time.Minute, 0, 1)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := le.Unlock(cancelled); !errors.Is(err, lease.ErrUnlockUnconfirmed) {
		t.Fatalf("first Unlock: %v, want ErrUnlockUnconfirmed", err)
	}
	eventually(t, 10*time.Second, "the first releases are held", func() bool { return gate.started.Load() == 5 })
	retried := make(chan error, 1)
	go func() { retried <- le.Unlock(context.Background()) }()
	eventually(t, 10*time.Second, "the retry queues behind them", func() bool {
		for i := range 5 {
			if l.Queued(i) != 1 {
				return false
			}
		}
		return true
	})
	open()
	if err := <-retried; err != nil {
		t.Fatalf("retried Unlock: %v, want nil: three nodes released the token", err)
	}
	if got := r.count(t, k, le.Token()); got != 0 {
		t.Fatalf("token left on %d nodes", got)
	}
}
