package quorum_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/quorum"
)

// directClients are clients of the nodes on direct connections, past the
// bed's fault proxies, whose CPU would otherwise count in the figures.
func (r *rig) directClients(b *testing.B) []redis.UniversalClient {
	b.Helper()
	clients := make([]redis.UniversalClient, len(r.nodes))
	for i, n := range r.nodes {
		c := redis.NewClient(testbed.ClientOptions(n.DirectAddr()))
		b.Cleanup(func() { _ = c.Close() })
		clients[i] = c
	}
	return clients
}

// directLocker is a Locker on directClients.
func (r *rig) directLocker(b *testing.B, opts ...quorum.Option) *quorum.Locker {
	b.Helper()
	l, err := quorum.New(r.directClients(b), opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	return l
}

// Lock followed by Unlock on five real masters, one at a time, each pair
// on a key of its own (Unlock returns at the majority, so the same key
// right away could find a node not yet released), with the amnesia guard
// on (the default) and off.
func BenchmarkLockUnlock(b *testing.B) {
	r := newRig(b)
	for _, guard := range []bool{true, false} {
		b.Run(fmt.Sprintf("guard=%v", guard), func(b *testing.B) {
			l := r.directLocker(b, quorum.WithAmnesiaGuard(guard))
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				le, err := l.Lock(ctx, "bench:"+strconv.Itoa(i))
				if err != nil {
					b.Fatal(err)
				}
				if err := le.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The peer: redsync's lock (one try, as uncontended) and unlock on the
// same five masters over direct connections, a key per pair as above.
func BenchmarkRedsyncLockUnlock(b *testing.B) {
	r := newRig(b)
	clients := r.directClients(b)
	pools := make([]rsredis.Pool, len(clients))
	for i, c := range clients {
		pools[i] = goredis.NewPool(c)
	}
	rs := redsync.New(pools...)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		m := rs.NewMutex("bench:redsync:"+strconv.Itoa(i), redsync.WithTries(1))
		if err := m.LockContext(ctx); err != nil {
			b.Fatal(err)
		}
		if _, err := m.UnlockContext(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// Many goroutines, each on its own key. (The bed is started once, outside
// the sub-benchmark that RunParallel calls several times.)
func BenchmarkLockUnlockParallel(b *testing.B) {
	r := newRig(b)
	l := r.directLocker(b)
	ctx := context.Background()
	var id atomic.Int64
	b.Run("keys=per-pair", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				le, err := l.Lock(ctx, "bench:parallel:"+strconv.FormatInt(id.Add(1), 10))
				if err != nil {
					b.Error(err)
					return
				}
				if err := le.Unlock(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// TryLock on a key another owner holds: the contended path, which ends as
// soon as a majority refused.
func BenchmarkTryLockContended(b *testing.B) {
	r := newRig(b)
	l := r.locker(b)
	ctx := context.Background()
	k := "bench:contended"
	held, err := r.locker(b, quorum.WithTTL(time.Hour), quorum.WithAmnesiaWindow(time.Hour)).Lock(ctx, k)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.TryLock(ctx, k); !errors.Is(err, lease.ErrNotAcquired) {
			b.Fatalf("got %v", err)
		}
	}
	b.StopTimer()
	_ = held.Unlock(ctx)
	noQuorumGoroutines(b, 2*time.Second)
}

// Extend of a held lease.
func BenchmarkExtend(b *testing.B) {
	r := newRig(b)
	l := r.locker(b)
	ctx := context.Background()
	le, err := l.Lock(ctx, "bench:extend")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := le.Extend(ctx, l.TTL()); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	_ = le.Unlock(ctx)
}
