package quorum_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/quorum"
)

// rwlock returns l's read-write lock name.
func rwlock(t *testing.T, l *quorum.Locker, name string) lease.RWLock {
	t.Helper()
	rw, err := l.RWLock(name)
	if err != nil {
		t.Fatal(err)
	}
	return rw
}

func TestRWLockReadersShareWriterExcludes(t *testing.T) {
	r := newRig(t)
	a, b := rwlock(t, r.locker(t), "rw:share"), rwlock(t, r.locker(t), "rw:share")
	var reads []lease.Lease
	for _, rw := range []lease.RWLock{a, b, a} {
		le, err := rw.TryRLock(ctxT(t, slow(5*time.Second)))
		if err != nil {
			t.Fatal("a reader beside readers:", err)
		}
		if le.Fence() != 0 {
			t.Errorf("a read lease has fence %d", le.Fence())
		}
		reads = append(reads, le)
	}
	if _, err := b.TryLock(ctxT(t, slow(5*time.Second))); !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("a writer beside readers: got %v, want ErrNotAcquired", err)
	}
	for _, le := range reads {
		if err := le.Unlock(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	w, err := b.TryLock(ctxT(t, slow(5*time.Second)))
	if err != nil {
		t.Fatal("the writer once the readers left:", err)
	}
	if w.Key() != "rw:share" {
		t.Errorf("the write lease's key is %q", w.Key())
	}
	if _, err := a.TryRLock(ctxT(t, slow(5*time.Second))); !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("a reader beside the writer: got %v, want ErrNotAcquired", err)
	}
	if _, err := a.TryLock(ctxT(t, slow(5*time.Second))); !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("a second writer: got %v, want ErrNotAcquired", err)
	}
	if err := w.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A waiting writer stops new readers; it gets the lock once the reader it
// waited for leaves, before any reader that came after it.
func TestRWLockWriterPreference(t *testing.T) {
	r := newRig(t)
	readers := rwlock(t, r.locker(t), "rw:pref")
	rl, err := readers.TryRLock(ctxT(t, slow(5*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	writer := rwlock(t, r.locker(t, quorum.WithMaxWait(slow(30*time.Second))), "rw:pref")
	got := make(chan lease.Lease, 1)
	go func() {
		le, err := writer.Lock(ctxT(t, slow(30*time.Second)))
		if err != nil {
			t.Error("the writer:", err)
		}
		got <- le
	}()
	eventually(t, 10*time.Second, "a new reader is refused while the writer waits", func() bool {
		le, err := readers.TryRLock(ctxT(t, slow(5*time.Second)))
		if err == nil {
			_ = le.Unlock(context.Background())
		}
		return errors.Is(err, lease.ErrNotAcquired)
	})
	if err := rl.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	w := <-got
	if w == nil {
		t.FailNow()
	}
	if _, err := readers.TryRLock(ctxT(t, slow(5*time.Second))); !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("a reader beside the writer: got %v", err)
	}
	if err := w.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "readers come back once the writer left", func() bool {
		le, err := readers.TryRLock(ctxT(t, slow(5*time.Second)))
		if err == nil {
			_ = le.Unlock(context.Background())
		}
		return err == nil
	})
}

// A reader that dies holding its lease (its Locker closed, no Unlock) stops
// a writer only until the lease's TTL runs out.
func TestRWLockDeadReaderExpires(t *testing.T) {
	r := newRig(t)
	ttl := slow(3 * time.Second)
	dying := r.locker(t, quorum.WithTTL(ttl))
	if _, err := rwlock(t, dying, "rw:dead").TryRLock(ctxT(t, slow(5*time.Second))); err != nil {
		t.Fatal(err)
	}
	_ = dying.Close()
	writer := rwlock(t, r.locker(t, quorum.WithMaxWait(3*ttl)), "rw:dead")
	w, err := writer.Lock(ctxT(t, 4*ttl))
	if err != nil {
		t.Fatal("the writer after the reader died:", err)
	}
	_ = w.Unlock(context.Background())
}

func TestRWLockWriterFence(t *testing.T) {
	r := newRig(t)
	rw := rwlock(t, r.locker(t, quorum.WithFencer(&memFencer{})), "rw:fence")
	var last int64
	for range 2 {
		w, err := rw.TryLock(ctxT(t, slow(5*time.Second)))
		if err != nil {
			t.Fatal(err)
		}
		if w.Fence() <= last {
			t.Fatalf("write fence %d after %d", w.Fence(), last)
		}
		last = w.Fence()
		_ = w.Unlock(context.Background())
	}
	rl, err := rw.TryRLock(ctxT(t, slow(5*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	if rl.Fence() != 0 {
		t.Errorf("a read lease has fence %d", rl.Fence())
	}
	_ = rl.Unlock(context.Background())
}

func TestRWLockDo(t *testing.T) {
	r := newRig(t)
	rw := rwlock(t, r.locker(t), "rw:do")
	err := rw.RDo(ctxT(t, slow(5*time.Second)), func(ctx context.Context, _ lease.Lease) error {
		_, err := rw.TryLock(ctx)
		if !errors.Is(err, lease.ErrNotAcquired) {
			t.Errorf("a writer inside RDo: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = rw.Do(ctxT(t, slow(5*time.Second)), func(ctx context.Context, _ lease.Lease) error {
		_, err := rw.TryRLock(ctx)
		if !errors.Is(err, lease.ErrNotAcquired) {
			t.Errorf("a reader inside Do: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.locker(t).RWLock(""); err == nil {
		t.Error("an empty name: no error")
	}
}
