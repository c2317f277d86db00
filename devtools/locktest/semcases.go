package locktest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/devtools/checker"
	"github.com/quorumlock/quorumlock/lease"
)

// semNeverOverAdmits: 12 goroutines on 3 Lockers take a semaphore of 3
// permits 5 times each; never more than 3 are inside, and never two on one
// permit (the checker's resource, unfenced, judges the permit keys).
func (s suite) semNeverOverAdmits(t *testing.T) {
	const permits, lockers, perLocker, rounds = 3, 3, 4, 5
	var inside, over, done atomic.Int32
	res := checker.NewSemaphoreResource(permits, checker.Unfenced)
	var wg sync.WaitGroup
	for l := range lockers {
		p := s.prims(t, time.Minute)
		for g := range perLocker {
			sem, err := p.Semaphore(t.Name(), permits)
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				for i := range rounds {
					le, err := sem.Acquire(ctxT(t, 2*time.Minute))
					if err != nil {
						t.Error(err)
						return
					}
					holder := fmt.Sprintf("%d/%d/%d", l, g, i)
					if inside.Add(1) > permits {
						over.Add(1)
					}
					res.Enter(le.Key(), le.Fence(), holder)
					time.Sleep(time.Millisecond)
					res.Exit(le.Key(), holder)
					inside.Add(-1)
					if err := le.Unlock(ctxT(t, time.Minute)); err != nil {
						t.Error(err)
					}
					done.Add(1)
				}
			})
		}
	}
	wg.Wait()
	v := res.Verdict()
	if over.Load() > 0 || done.Load() != lockers*perLocker*rounds || !v.OK() || v.MaxHolders > permits {
		t.Fatalf("%d times more than %d inside, %d of %d done; resource: %d at most, %v",
			over.Load(), permits, done.Load(), lockers*perLocker*rounds, v.MaxHolders, v.Report)
	}
}

// semTryAcquireWhenFull: with every permit held TryAcquire fails with
// ErrNotAcquired; a released permit is the one the next holder gets.
func (s suite) semTryAcquireWhenFull(t *testing.T) {
	a, b := s.semaphore(t, time.Minute, t.Name(), 2), s.semaphore(t, time.Minute, t.Name(), 2)
	p1 := must(t)(a.TryAcquire(ctxT(t, time.Minute)))
	p2 := must(t)(a.TryAcquire(ctxT(t, time.Minute)))
	unlock(t, p2)
	if p1.Key() == p2.Key() {
		t.Fatalf("two holders of permit %s", p1.Key())
	}
	if le, err := b.TryAcquire(ctxT(t, time.Minute)); !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("TryAcquire with both permits held: lease %v, %v; want ErrNotAcquired", le != nil, err)
	}
	if err := p1.Unlock(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	p3 := must(t)(b.TryAcquire(ctxT(t, time.Minute)))
	unlock(t, p3)
	if p3.Key() != p1.Key() {
		t.Fatalf("the freed permit is %s, the next holder got %s", p1.Key(), p3.Key())
	}
}

// semPermitsMismatch: a handle naming another count for a semaphore in use
// fails with ErrPermitsMismatch, Acquire as well as TryAcquire, without
// waiting; a handle with the same count is served.
func (s suite) semPermitsMismatch(t *testing.T) {
	if _, err := s.prims(t, time.Minute).Semaphore(t.Name(), 0); err == nil {
		t.Fatal("Semaphore with 0 permits succeeded")
	}
	held := must(t)(s.semaphore(t, time.Minute, t.Name(), 2).TryAcquire(ctxT(t, time.Minute)))
	unlock(t, held)
	other, err := s.prims(t, 10*time.Second).Semaphore(t.Name(), 3)
	if errors.Is(err, lease.ErrPermitsMismatch) {
		return // found out before any acquisition
	} else if err != nil {
		t.Fatal(err)
	}
	for name, try := range map[string]func(context.Context) (lease.Lease, error){
		"TryAcquire": other.TryAcquire, "Acquire": other.Acquire,
	} {
		if le, err := try(ctxT(t, time.Minute)); !errors.Is(err, lease.ErrPermitsMismatch) {
			t.Fatalf("%s with 3 permits on a semaphore of 2: lease %v, %v; want ErrPermitsMismatch", name, le != nil, err)
		}
	}
	same := must(t)(s.semaphore(t, time.Minute, t.Name(), 2).TryAcquire(ctxT(t, time.Minute)))
	_ = same.Unlock(ctxT(t, time.Minute))
}

// semWaiterWoken: two waiters on a full semaphore wait while it is full
// and both get a permit once the holder releases its two.
func (s suite) semWaiterWoken(t *testing.T) {
	a := s.semaphore(t, time.Minute, t.Name(), 2)
	held := []lease.Lease{must(t)(a.TryAcquire(ctxT(t, time.Minute))), must(t)(a.TryAcquire(ctxT(t, time.Minute)))}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	got := make(chan acquired, 2)
	for w := range 2 {
		sem := s.semaphore(t, time.Minute, t.Name(), 2)
		wg.Go(func() {
			le, err := sem.Acquire(ctx)
			got <- acquired{w, le, err}
		})
	}
	none(t, got, 200*time.Millisecond, "a waiter acquired while every permit was held")
	released := time.Now()
	for _, le := range held {
		if err := le.Unlock(ctxT(t, time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	keys := map[string]bool{}
	for range 2 {
		w := next(t, got, 30*time.Second, "waiter")
		unlock(t, w.le)
		keys[w.le.Key()] = true
	}
	if len(keys) != 2 {
		t.Fatalf("both waiters hold permit %v", keys)
	}
	t.Logf("both waiters held %v after the release", time.Since(released))
}

// semPermitFencesIncrease: each permit key taken again carries a greater
// fence, and the permits are no more keys than there are permits.
func (s suite) semPermitFencesIncrease(t *testing.T) {
	ls := []lease.Semaphore{s.semaphore(t, time.Minute, t.Name(), 2), s.semaphore(t, time.Minute, t.Name(), 2)}
	last := map[string]int64{}
	for round := range 3 {
		p := must(t)(ls[round%2].TryAcquire(ctxT(t, time.Minute)))
		q := must(t)(ls[(round+1)%2].TryAcquire(ctxT(t, time.Minute)))
		if round == 0 && p.Fence() == 0 {
			t.Logf("permit %s has fence 0 (the backend's Lockers have no fences): the fence assertion is skipped", p.Key())
			_ = p.Unlock(ctxT(t, time.Minute))
			_ = q.Unlock(ctxT(t, time.Minute))
			return
		}
		for _, le := range []lease.Lease{p, q} {
			f := le.Fence()
			if f <= last[le.Key()] || le.FenceOf(le.Key()) != f {
				t.Fatalf("round %d: permit %s fence %d (FenceOf %d) after %d", round, le.Key(), f, le.FenceOf(le.Key()), last[le.Key()])
			}
			last[le.Key()] = f
			if err := le.Unlock(ctxT(t, time.Minute)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(last) != 2 {
		t.Fatalf("2 permits were held as %d keys: %v", len(last), last)
	}
}
