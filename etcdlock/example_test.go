package etcdlock_test

import (
	"context"
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
