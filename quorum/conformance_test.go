package quorum_test

import (
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/devtools/locktest"
	"github.com/quorumlock/quorumlock/lease"
	"github.com/quorumlock/quorumlock/quorum"
)

// The lease API's conformance suite, the one etcdlock passes too.
func TestConformance(t *testing.T) { locktest.Run(t, backend(newRig(t))) }

// The primitives' conformance cases, the ones etcdlock passes too.
func TestConformancePrimitives(t *testing.T) { locktest.RunPrimitives(t, backend(newRig(t))) }

// backend is the suite's view of Lockers on r.
func backend(r *rig) locktest.Backend {
	fences := &memFencer{} // one sequence per key for every Locker, as a database's would be
	return locktest.Backend{
		TTL: slow(6 * time.Second), // above twice the rig's node timeout, under -race too
		New: func(t *testing.T, ttl, maxWait time.Duration) lease.Locker {
			return r.locker(t, quorum.WithTTL(ttl), quorum.WithMaxWait(maxWait), quorum.WithFencer(fences))
		},
		Drop: func(t *testing.T, le lease.Lease) {
			for _, k := range le.Keys() {
				for i := range r.admin {
					if err := r.admin[i].Del(ctxT(t, 10*time.Second), k).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
		},
	}
}
