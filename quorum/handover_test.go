package quorum_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/quorum"
)

// scriptCalls is a client hook that counts the script calls each node ran,
// by script, and can hold the answers of hand-overs until told.
type scriptCalls struct {
	mu   sync.Mutex
	n    map[string]int
	hold chan struct{} // when set, hand-over answers wait for it to close
	ran  chan struct{} // closed once a held hand-over ran
	once sync.Once
}

func newScriptCalls() *scriptCalls { return &scriptCalls{n: map[string]int{}} }

func (s *scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			s.see(cmd)
		}
		return err
	}
}

func (s *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		s.see(cmd)
		return err
	}
}

func (s *scriptCalls) see(cmd redis.Cmder) {
	args := cmd.Args()
	if cmd.Name() != "evalsha" || len(args) < 2 {
		return
	}
	sha, _ := args[1].(string)
	name := quorum.ScriptNames[sha]
	s.mu.Lock()
	s.n[name]++
	hold := s.hold
	s.mu.Unlock()
	if name == "handover" && hold != nil {
		s.once.Do(func() { close(s.ran) })
		<-hold
	}
}

func (s *scriptCalls) count(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[name]
}

// lockAsync runs l.Lock(ctx, k) in a goroutine; the channel yields its result.
func lockAsync(ctx context.Context, l *quorum.Locker, k string) <-chan lockResult {
	got := make(chan lockResult, 1)
	go func() {
		le, err := l.Lock(ctx, k)
		got <- lockResult{le, err}
	}()
	return got
}

type lockResult struct {
	le  lease.Lease
	err error
}

// TestUnlockHandsTheKeyOverToTheWaiter: the Unlock of a lease whose key
// a Lock call of the same Locker waits for passes the key to it in one
// round of the hand-over script: the waiter holds the key on every node
// with its own token, with no vote of its own (no acquire script runs
// after the Unlock), and its lease works as any other.
func TestUnlockHandsTheKeyOverToTheWaiter(t *testing.T) {
	r := newRig(t)
	calls := newScriptCalls()
	rec := &recorder{}
	l, err := quorum.New(r.hookedClients(t, calls), append(patient(), quorum.WithObserver(rec))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	k := key(t)
	held, err := l.Lock(ctxT(t, 10*time.Second), k)
	if err != nil {
		t.Fatal(err)
	}
	got := lockAsync(ctxT(t, slow(time.Minute)), l, k)
	eventually(t, 10*time.Second, "the waiter queues", func() bool { return l.Waiting(k) == 1 })
	eventually(t, 10*time.Second, "the waiter's attempt ran on every node", func() bool { return calls.count("acquire") == 10 })
	if err := held.Unlock(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	g := <-got
	if g.err != nil {
		t.Fatal(g.err)
	}
	if g.le.Token() == held.Token() {
		t.Fatal("the handed-over lease has the released lease's token")
	}
	eventually(t, 10*time.Second, "the new token is on every node", func() bool { return r.count(t, k, g.le.Token()) == 5 })
	if n := calls.count("acquire"); n != 10 {
		t.Fatalf("%d acquire script calls, want 10 (the holder's and the waiter's first attempt only)", n)
	}
	if n := calls.count("handover"); n != 5 {
		t.Fatalf("%d hand-over script calls, want 5", n)
	}
	if ev := rec.snapshot().acquires; len(ev) != 2 || ev[1].Attempts != 2 || ev[1].Result != lease.ResultAcquired {
		t.Fatalf("acquire events %+v, want the waiter's with 2 attempts (its own, the hand-over)", ev)
	}
	if err := g.le.Extend(ctxT(t, 10*time.Second), 4*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := g.le.Unlock(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the key is free", func() bool { return r.count(t, k, g.le.Token()) == 0 })
}

// TestHandoverToAWaiterThatLeftIsReleased: a waiter that gives up while
// the hand-over to it is out does not strand the key: the lease set for
// it is released on every node, and the Unlock succeeds.
func TestHandoverToAWaiterThatLeftIsReleased(t *testing.T) {
	r := newRig(t)
	calls := newScriptCalls()
	l, err := quorum.New(r.hookedClients(t, calls), append(patient(), quorum.WithNodeTimeout(slow(5*time.Second)))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	k := key(t)
	held, err := l.Lock(ctxT(t, 10*time.Second), k)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctxT(t, slow(time.Minute)))
	defer cancel()
	got := lockAsync(wctx, l, k)
	eventually(t, 10*time.Second, "the waiter queues", func() bool { return l.Waiting(k) == 1 })
	calls.mu.Lock()
	calls.hold, calls.ran = make(chan struct{}), make(chan struct{})
	calls.mu.Unlock()
	unlocked := make(chan error, 1)
	go func() { unlocked <- held.Unlock(context.Background()) }()
	waitClosed(t, calls.ran, 10*time.Second, "a node ran the hand-over")
	cancel()
	if g := <-got; !errors.Is(g.err, context.Canceled) {
		t.Fatalf("the cancelled waiter got %v, want context.Canceled", g.err)
	}
	close(calls.hold)
	if err := <-unlocked; err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the key is free on every node", func() bool {
		vs := r.values(t, k)
		for _, v := range vs {
			if v != "" {
				return false
			}
		}
		return true
	})
}

// TestHandoversInARowAreBounded: after quorum.MaxHandovers hand-overs in
// a row the key is released (and announced), so that other Lockers'
// waiters get their turn; this Locker's next waiter then takes it by a
// vote of its own, woken by the announcement, and the waiters are still
// served oldest first.
func TestHandoversInARowAreBounded(t *testing.T) {
	r := newRig(t)
	calls := newScriptCalls()
	l, err := quorum.New(r.hookedClients(t, calls), patient()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	k := key(t)
	ctx := ctxT(t, slow(time.Minute))
	first, err := l.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	waiters := quorum.MaxHandovers + 2
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := range waiters {
		wg.Go(func() {
			le, err := l.Lock(ctx, k)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if err := le.Unlock(context.Background()); err != nil {
				t.Errorf("waiter %d: unlock: %v", i, err)
			}
		})
		eventually(t, 10*time.Second, "the waiter queues", func() bool { return l.Waiting(k) == i+1 })
	}
	eventually(t, 10*time.Second, "the key's releases are announced", func() bool { return l.SubscribedBy(k) >= 3 })
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if got, want := fmt.Sprint(order), fmt.Sprint(seq(waiters)); got != want {
		t.Fatalf("acquired in the order %s, want %s", got, want)
	}
	// first -> 0 -> ... -> MaxHandovers-1 by hand-over, then a release; the
	// next waiter votes, and hands over to the last, which releases.
	eventually(t, 10*time.Second, "every node answered", func() bool {
		return calls.count("handover") == 5*(quorum.MaxHandovers+1)
	})
	eventually(t, 10*time.Second, "two releases, on every node", func() bool { return calls.count("release") == 10 })
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}
