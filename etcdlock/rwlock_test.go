package etcdlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/etcdlock"
	"github.com/quorumlock/quorumlock/lease"
)

// The read-write lock on one 3-member cluster; each subtest has a name of
// its own.
func TestRWLock(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Etcd: 3})
	admin := newClient(t, bed)
	t.Run("ReadersShareWriterWaits", func(t *testing.T) { testRWReadersShare(t, bed, admin) })
	t.Run("WriterExcludes", func(t *testing.T) { testRWWriterExcludes(t, bed) })
	t.Run("ReaderDies", func(t *testing.T) { testRWReaderDies(t, bed, admin) })
	t.Run("Fences", func(t *testing.T) { testRWFences(t, bed) })
	t.Run("Do", func(t *testing.T) { testRWDo(t, bed) })
}

// newRW returns l's read-write lock name.
func newRW(t *testing.T, l *etcdlock.Locker, name string) lease.RWLock {
	t.Helper()
	rw, err := l.RWLock(name)
	if err != nil {
		t.Fatal(err)
	}
	return rw
}

// Readers of two Lockers (two of one) hold at once; a writer waits for
// them, and while it waits a new reader is refused (writer preference);
// once the readers leave, the writer holds.
func testRWReadersShare(t *testing.T, bed *testbed.Bed, admin *clientv3.Client) {
	a := newLocker(t, bed, etcdlock.WithTTL(sessionTTL))
	b := newLocker(t, bed, etcdlock.WithTTL(sessionTTL))
	w := newLocker(t, bed, etcdlock.WithTTL(sessionTTL), etcdlock.WithMaxWait(time.Minute))
	var readers []lease.Lease
	for _, l := range []*etcdlock.Locker{a, a, b} {
		r, err := newRW(t, l, "share").RLock(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if r.Key() != "share" || r.Fence() != 0 {
			t.Fatalf("reader Key %q Fence %d, want share and 0", r.Key(), r.Fence())
		}
		readers = append(readers, r)
	}
	if _, err := newRW(t, w, "share").TryLock(ctxT(t)); !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("TryLock with readers in: %v, want ErrNotAcquired", err)
	}
	writer := later(t, newRW(t, w, "share").Lock)
	waitFor(t, "the writer's key", func() bool { return countKeys(t, admin, "quorumlock/share/w/") == 1 })
	if _, err := newRW(t, b, "share").TryRLock(ctxT(t)); !errors.Is(err, lease.ErrNotAcquired) {
		t.Fatalf("TryRLock with a writer waiting: %v, want ErrNotAcquired", err)
	}
	late := later(t, newRW(t, b, "share").RLock)
	waitFor(t, "the late reader's key", func() bool { return countKeys(t, admin, "quorumlock/share/r/") == 4 })
	for _, r := range readers {
		pending(t, writer, "the writer, readers in")
		if err := r.Unlock(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	wl := await(t, writer, 10*time.Second)
	pending(t, late, "a reader that came after the writer")
	if err := wl.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	await(t, late, 10*time.Second)
}

// While a writer holds, neither a reader nor another writer gets in; once
// it leaves, both can.
func testRWWriterExcludes(t *testing.T, bed *testbed.Bed) {
	a := newLocker(t, bed, etcdlock.WithTTL(sessionTTL))
	b := newLocker(t, bed, etcdlock.WithTTL(sessionTTL), etcdlock.WithMaxWait(time.Second))
	wl, err := newRW(t, a, "excl").TryLock(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	rw := newRW(t, b, "excl")
	for name, try := range map[string]func(context.Context) (lease.Lease, error){
		"TryRLock": rw.TryRLock, "TryLock": rw.TryLock, "RLock": rw.RLock, "Lock": rw.Lock,
		"another writer of the same Locker": newRW(t, a, "excl").TryLock,
	} {
		if _, err := try(ctxT(t)); !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("%s while a writer holds: %v, want ErrNotAcquired", name, err)
		}
	}
	if err := wl.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	r, err := rw.TryRLock(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Unlock(ctxT(t))
	w2, err := rw.TryLock(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	_ = w2.Unlock(ctxT(t))
}

// A reader whose Locker closes loses its lease, and its key goes with its
// session: the waiting writer gets in.
func testRWReaderDies(t *testing.T, bed *testbed.Bed, admin *clientv3.Client) {
	dying := newLocker(t, bed, etcdlock.WithTTL(sessionTTL))
	w := newLocker(t, bed, etcdlock.WithTTL(sessionTTL), etcdlock.WithMaxWait(time.Minute))
	r, err := newRW(t, dying, "dies").RLock(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	writer := later(t, newRW(t, w, "dies").Lock)
	waitFor(t, "the writer's key", func() bool { return countKeys(t, admin, "quorumlock/dies/w/") == 1 })
	pending(t, writer, "the writer, a reader in")
	if err := dying.Close(); err != nil {
		t.Fatal(err)
	}
	mustLose(t, r, lease.ErrLeaseLost, time.Second)
	mustHeld(t, await(t, writer, 10*time.Second))
}

// A writer's fence grows from writer to writer, or is the Fencer's token
// on the name; a reader's is 0 either way.
func testRWFences(t *testing.T, bed *testbed.Bed) {
	l := newLocker(t, bed, etcdlock.WithTTL(sessionTTL))
	w1, err := newRW(t, l, "fences").TryLock(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	_ = w1.Unlock(ctxT(t))
	w2, err := newRW(t, l, "fences").TryLock(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	_ = w2.Unlock(ctxT(t))
	if w1.Fence() <= 0 || w2.Fence() <= w1.Fence() {
		t.Fatalf("writers' fences %d then %d", w1.Fence(), w2.Fence())
	}
	f := &memFencer{}
	fl := newLocker(t, bed, etcdlock.WithTTL(sessionTTL), etcdlock.WithFencer(f))
	r, err := newRW(t, fl, "fences").TryRLock(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if r.Fence() != 0 || f.last("fences") != 0 {
		t.Fatalf("reader fence %d, Fencer asked %d times", r.Fence(), f.last("fences"))
	}
	_ = r.Unlock(ctxT(t))
	w3, err := newRW(t, fl, "fences").TryLock(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer w3.Unlock(ctxT(t))
	if w3.Fence() != 1 || f.last("fences") != 1 {
		t.Fatalf("writer fence %d with the Fencer's %d", w3.Fence(), f.last("fences"))
	}
}

// RDo and Do run fn under a read and a write lease.
func testRWDo(t *testing.T, bed *testbed.Bed) {
	l := newLocker(t, bed, etcdlock.WithTTL(sessionTTL))
	rw := newRW(t, l, "rwdo")
	if _, err := l.RWLock(""); err == nil {
		t.Fatal("an empty name was accepted")
	}
	err := rw.RDo(ctxT(t), func(ctx context.Context, le lease.Lease) error {
		r, err := newRW(t, l, "rwdo").TryRLock(ctx)
		if err != nil {
			return err // readers share
		}
		defer r.Unlock(ctx)
		_, err = newRW(t, l, "rwdo").TryLock(ctx)
		if !errors.Is(err, lease.ErrNotAcquired) {
			return errors.New("a writer got in beside a reader")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = rw.Do(ctxT(t), func(ctx context.Context, le lease.Lease) error {
		_, err := newRW(t, l, "rwdo").TryRLock(ctx)
		if !errors.Is(err, lease.ErrNotAcquired) {
			return errors.New("a reader got in beside the writer")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
