package etcdlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/etcdlock"
	"github.com/quorumlock/quorumlock/lease"
)

// A request to etcd that timed out while the wait still had time left says
// that etcd did not answer in time, not that another owner still holds the
// key: on a reachable cluster it is ErrQuorumUnavailable, and only the end
// of the wait itself (WithMaxWait) is ErrNotAcquired.
func TestRequestTimeoutIsNotTheEndOfTheWait(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Etcd: 1})
	l := newLocker(t, bed, etcdlock.WithTTL(sessionTTL), etcdlock.WithMaxWait(time.Minute))
	ctx := ctxT(t)

	// The claims' wait has most of its minute left; one Txn's own timeout
	// (the node timeout) ended it.
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	rctx, rcancel := context.WithTimeout(wctx, time.Nanosecond)
	defer rcancel()
	<-rctx.Done()
	err := etcdlock.GrantError(l, ctx, wctx, "k", rctx.Err())
	if !errors.Is(err, lease.ErrQuorumUnavailable) || errors.Is(err, lease.ErrNotAcquired) {
		t.Errorf("a request's timeout with the wait not over: %v, want ErrQuorumUnavailable", err)
	}

	// The wait itself ran out: the key is still held.
	ended, cancelEnded := context.WithTimeout(ctx, time.Nanosecond)
	defer cancelEnded()
	<-ended.Done()
	err = etcdlock.GrantError(l, ctx, ended, "k", ended.Err())
	if !errors.Is(err, lease.ErrNotAcquired) {
		t.Errorf("the end of the wait: %v, want ErrNotAcquired", err)
	}

	// The caller's own context ended: its error, nothing else.
	caller, cancelCaller := context.WithCancel(ctx)
	cancelCaller()
	err = etcdlock.GrantError(l, caller, caller, "k", caller.Err())
	if !errors.Is(err, context.Canceled) || errors.Is(err, lease.ErrNotAcquired) || errors.Is(err, lease.ErrQuorumUnavailable) {
		t.Errorf("the caller's context ended: %v, want context.Canceled alone", err)
	}
}
