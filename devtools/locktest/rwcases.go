package locktest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/devtools/checker"
	"github.com/quorumlock/quorumlock/lease"
)

// rwReadersShare: readers on three Lockers hold at once, and shut the
// writer out until the last one leaves.
func (s suite) rwReadersShare(t *testing.T) {
	var readers []lease.Lease
	for range 3 {
		readers = append(readers, must(t)(s.rwlock(t, time.Minute, t.Name()).TryRLock(ctxT(t, time.Minute))))
	}
	w := s.rwlock(t, time.Minute, t.Name())
	for i, r := range readers {
		if le, err := w.TryLock(ctxT(t, time.Minute)); !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("TryLock with %d readers: lease %v, %v; want ErrNotAcquired", len(readers)-i, le != nil, err)
		}
		if err := r.Unlock(ctxT(t, time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	_ = must(t)(w.TryLock(ctxT(t, time.Minute))).Unlock(ctxT(t, time.Minute))
}

// rwWriterExcludes: a writer shuts out readers and writers, successive
// writers' fences increase, and under load (9 goroutines on 3 Lockers,
// one hold in three a write) no read overlaps a write and no two writes
// overlap, as the checker's resource sees them.
func (s suite) rwWriterExcludes(t *testing.T) {
	w, o := s.rwlock(t, time.Minute, t.Name()), s.rwlock(t, time.Minute, t.Name())
	first := must(t)(w.TryLock(ctxT(t, time.Minute)))
	for name, try := range map[string]func(context.Context) (lease.Lease, error){"TryRLock": o.TryRLock, "TryLock": o.TryLock} {
		if le, err := try(ctxT(t, time.Minute)); !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("%s while a writer holds: lease %v, %v; want ErrNotAcquired", name, le != nil, err)
		}
	}
	if err := first.Unlock(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	second := must(t)(o.TryLock(ctxT(t, time.Minute)))
	if err := second.Unlock(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	if first.Fence() > 0 && second.Fence() <= first.Fence() {
		t.Fatalf("writer fences %d then %d", first.Fence(), second.Fence())
	}
	v := s.rwLoad(t)
	if !v.OK() || v.Writes != 18 || v.Reads != 36 {
		t.Fatalf("%d writes, %d reads (want 18 and 36), %d readers at most: %v", v.Writes, v.Reads, v.MaxReaders, v.Report)
	}
	t.Logf("%d writes, %d reads, %d readers at most together", v.Writes, v.Reads, v.MaxReaders)
}

// rwLoad runs 9 goroutines on 3 Lockers, each holding 6 times (a write
// one time in three), and returns the unfenced resource's verdict.
func (s suite) rwLoad(t *testing.T) checker.RWVerdict {
	res := checker.NewRWResource(checker.Unfenced)
	var wg sync.WaitGroup
	for l := range 3 {
		p := s.prims(t, time.Minute)
		for g := range 3 {
			rw, err := p.RWLock(t.Name())
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				for i := range 6 {
					holder := fmt.Sprintf("%d/%d/%d", l, g, i)
					ok := false
					if (g+i)%3 == 0 {
						ok = hold(t, rw.Lock, func(le lease.Lease) { res.BeginWrite(holder, le.Fence()) }, func() { res.EndWrite(holder) })
					} else {
						ok = hold(t, rw.RLock, func(lease.Lease) { res.BeginRead(holder) }, func() { res.EndRead(holder) })
					}
					if !ok {
						return
					}
				}
			})
		}
	}
	wg.Wait()
	return res.Verdict()
}

// hold takes a lease with lock, calls in and out around a brief hold,
// and releases it; it reports whether the lease was taken.
func hold(t *testing.T, lock func(context.Context) (lease.Lease, error), in func(lease.Lease), out func()) bool {
	le, err := lock(ctxT(t, 2*time.Minute))
	if err != nil {
		t.Error(err)
		return false
	}
	in(le)
	time.Sleep(time.Millisecond)
	out()
	if err := le.Unlock(ctxT(t, time.Minute)); err != nil {
		t.Error(err)
	}
	return true
}

// rwWriterPreference: a writer waiting behind a reader stops new readers
// (TryRLock fails with ErrNotAcquired), gets the lock when the reader
// leaves, and readers come back once it is done.
func (s suite) rwWriterPreference(t *testing.T) {
	r1, r2 := s.rwlock(t, time.Minute, t.Name()), s.rwlock(t, time.Minute, t.Name())
	reading := must(t)(r1.TryRLock(ctxT(t, time.Minute)))
	w := s.rwlock(t, time.Minute, t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	got := make(chan acquired, 1)
	wg.Go(func() {
		le, err := w.Lock(ctx)
		got <- acquired{0, le, err}
	})
	// The writer's wait becomes visible some time after Lock is called.
	refused := false
	for i := 0; i < 100 && !refused; i++ {
		le, err := r2.TryRLock(ctxT(t, time.Minute))
		switch {
		case errors.Is(err, lease.ErrNotAcquired):
			refused = true
		case err != nil:
			t.Fatal(err)
		default:
			_ = le.Unlock(ctxT(t, time.Minute))
			none(t, got, 50*time.Millisecond, "the writer acquired while a reader held")
		}
	}
	if !refused {
		t.Fatal("new readers still admitted 5s after a writer began waiting")
	}
	select {
	case a := <-got:
		t.Fatalf("the writer acquired while a reader held (lease %v, err %v)", a.le != nil, a.err)
	default:
	}
	if err := reading.Unlock(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	writing := next(t, got, 30*time.Second, "the waiting writer").le
	if le, err := r2.TryRLock(ctxT(t, time.Minute)); !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("TryRLock while the writer holds: lease %v, %v; want ErrNotAcquired", le != nil, err)
	}
	if err := writing.Unlock(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	_ = must(t)(r2.TryRLock(ctxT(t, time.Minute))).Unlock(ctxT(t, time.Minute))
}
