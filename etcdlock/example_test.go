package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quorumlock/quorumlock/etcdlock"
	"github.com/quorumlock/quorumlock/lease"
)

// Lock a key on etcd, write with its fence, release it. (Compiled, not
// run: it needs an etcd cluster.)
func ExampleLocker_Lock() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}, DialTimeout: 2 * time.Second})
	if err != nil {
		panic(err)
	}
	defer cli.Close()
	l, err := etcdlock.New(cli, etcdlock.WithTTL(10*time.Second), etcdlock.WithMaxWait(5*time.Second))
	if err != nil {
		panic(err)
	}
	defer l.Close()
	ctx := context.Background()
	le, err := l.Lock(ctx, "stock:42")
	if err != nil {
		panic(err) // errors.Is(err, lease.ErrNotAcquired), lease.ErrQuorumUnavailable, ...
	}
	defer le.Unlock(ctx)
	fmt.Println("write with fence", le.Fence()) // the resource rejects a fence not above the last it saw
}

// Do keeps the lease while fn runs and cancels fn's context if it is lost.
func ExampleLocker_Do() {
	var l *etcdlock.Locker // from etcdlock.New
	_ = l.Do(context.Background(), "report:daily", func(ctx context.Context, le lease.Lease) error {
		<-ctx.Done() // stop at once when the lease is lost
		return ctx.Err()
	})
}

// At most three workers at once call a rate-limited API: each holds a
// permit, with a fence of its own, while it works. (Compiled, not run.)
func ExampleLocker_Semaphore() {
	var l *etcdlock.Locker // from etcdlock.New
	sem, err := l.Semaphore("api:partner", 3)
	if err != nil {
		panic(err) // the count is out of 1 to 1024
	}
	err = sem.Do(context.Background(), func(ctx context.Context, permit lease.Lease) error {
		fmt.Println("calling with", permit.Key(), "fence", permit.Fence()) // api:partner/slot/0..2
		return nil
	})
	if errors.Is(err, lease.ErrPermitsMismatch) {
		fmt.Println("another handle uses this name with another count")
	}
}

// Readers of a catalog share it; the writer that rebuilds it waits for
// them and stops new ones meanwhile. (Compiled, not run.)
func ExampleLocker_RWLock() {
	var l *etcdlock.Locker // from etcdlock.New
	rw, err := l.RWLock("catalog")
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	_ = rw.RDo(ctx, func(ctx context.Context, r lease.Lease) error {
		return nil // read: other readers may be in too
	})
	w, err := rw.Lock(ctx)
	if err != nil {
		panic(err) // lease.ErrNotAcquired after WithMaxWait, ...
	}
	defer w.Unlock(ctx)
	fmt.Println("rebuild with fence", w.Fence()) // a reader's Fence is 0
}

// One scheduler leads; its term fences its writes, and the others follow
// the leader. (Compiled, not run.)
func ExampleLocker_Election() {
	var l *etcdlock.Locker // from etcdlock.New
	e, err := l.Election("scheduler")
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	lead, err := e.Campaign(ctx, "10.0.0.7:8080") // waits until elected
	if err != nil {
		panic(err)
	}
	fmt.Println("leading in term", lead.Fence()) // write with it as the fence
	select {
	case <-lead.Lost(): // the session ended: stop at once
	default:
		_ = e.Resign(ctx)
	}
	for ld := range e.Observe(ctx) { // until ctx ends
		fmt.Println("leader", ld.Value, "term", ld.Term)
	}
}
