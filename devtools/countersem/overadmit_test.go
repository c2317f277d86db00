package countersem_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/devtools/checker"
	"github.com/quorumlock/quorumlock/devtools/countersem"
	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
	"github.com/quorumlock/quorumlock/lease"
)

// TestOverAdmitsWithoutFaults is the negative control of the semaphore
// checks: the per-node counter semaphore over five healthy masters lets
// more holders in than it has permits, with no fault injected. Each round
// starts its acquirers together; each acquirer waits a random 0 to 2ms
// before its request to each node, so that the nodes see them in
// different orders, as nodes on other machines would.
//
// The arithmetic: with n nodes, N permits and quorum q, the nodes give at
// most n*N admissions and each holder needs q, so N+1 holders fit
// whenever (N+1)*q <= n*N, and never more than floor(n*N/q). Here n = 5
// and q = 3: for N = 2, 3 holders need 9 of the 10 admissions (with
// uniformly random orders per node, all 3 win when the 5 nodes turn away
// 2, 2 and 1 of them, 90 of the 3^5 = 243 cases, 37%); for N = 5, up to
// floor(25/3) = 8 can hold at once.
func TestOverAdmitsWithoutFaults(t *testing.T) {
	bed := bedtest.Start(t, testbed.Options{Redis: 5})
	admin := bedtest.RedisClients(t, bed)
	for _, c := range []struct{ limit, acquirers, rounds int }{{2, 3, 300}, {5, 10, 300}} {
		t.Run(fmt.Sprintf("limit%d-acquirers%d", c.limit, c.acquirers), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			name := "countersem:" + t.Name()
			r := race{limit: c.limit, sems: acquirers(ctx, t, bed, name, c.limit, c.acquirers)}
			held := make([]int, c.rounds) // holders per round
			res := checker.NewSemaphoreResource(c.limit, checker.Unfenced)
			for i := range held {
				held[i] = r.round(ctx, t, res)
			}
			over, most, hist := tally(held, c.limit)
			v := res.Verdict()
			t.Logf("limit %d, %d acquirers, %d rounds: %d rounds over the limit, at most %d holders at once; rounds by holders %v",
				c.limit, c.acquirers, c.rounds, over, most, hist)
			if v.MaxHolders != most || len(v.Violations) != over {
				t.Fatalf("the checker saw %d holders at most and %d violations, the rounds %d and %d: %v", v.MaxHolders, len(v.Violations), most, over, v.Report)
			}
			if bound := 5 * c.limit / 3; most > bound {
				t.Fatalf("%d holders at once, above floor(n*N/q) = %d: the nodes admitted more than their limit", most, bound)
			}
			if over == 0 {
				t.Fatal("no round over-admitted: the negative control did not show the scheme's flaw")
			}
			for i, a := range admin {
				if n := a.ZCard(ctx, name).Val(); n != 0 {
					t.Errorf("node %d keeps %d holders after every release", i, n)
				}
			}
		})
	}
}

// acquirers returns one semaphore per acquirer, each on clients of its
// own (connected before the rounds, so that no round waits for a dial),
// each with its own random delays before each node's request.
func acquirers(ctx context.Context, t *testing.T, bed *testbed.Bed, name string, limit, n int) []*countersem.Semaphore {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	sems := make([]*countersem.Semaphore, n)
	for a := range sems {
		var nodes []redis.Cmdable
		for _, c := range bedtest.RedisClients(t, bed) {
			if err := c.Ping(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			nodes = append(nodes, c)
		}
		rng := rand.New(rand.NewPCG(seed, uint64(a)))
		s, err := countersem.New(nodes, name, limit,
			countersem.WithTTL(30*time.Second), countersem.WithNodeTimeout(5*time.Second),
			countersem.WithSendDelay(func(int) time.Duration { return time.Duration(rng.Int64N(int64(2 * time.Millisecond))) }))
		if err != nil {
			t.Fatal(err)
		}
		sems[a] = s
	}
	return sems
}

// race is one set of acquirers of one semaphore.
type race struct {
	limit int
	sems  []*countersem.Semaphore
}

// round starts every acquirer at once, waits until each holds or lost,
// records the holders in res (they are inside together), then releases
// them; it returns how many held.
func (r race) round(ctx context.Context, t *testing.T, res *checker.SemaphoreResource) int {
	start := make(chan struct{})
	permits := make([]*countersem.Permit, len(r.sems))
	errs := make([]error, len(r.sems))
	var wg sync.WaitGroup
	for a, s := range r.sems {
		wg.Go(func() {
			<-start
			permits[a], errs[a] = s.TryAcquire(ctx)
		})
	}
	close(start)
	wg.Wait()
	held := 0
	for a, p := range permits {
		if errs[a] != nil {
			if !errors.Is(errs[a], lease.ErrNotAcquired) {
				t.Fatalf("acquirer %d: %v", a, errs[a])
			}
			continue
		}
		held++
		res.Enter(p.Token(), 0, fmt.Sprint("acquirer ", a))
	}
	for a, p := range permits {
		if p != nil {
			res.Exit(p.Token(), fmt.Sprint("acquirer ", a))
			if err := p.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	return held
}

// tally counts the rounds over limit, the most holders of a round, and the
// rounds by their number of holders.
func tally(held []int, limit int) (over, most int, hist map[int]int) {
	hist = map[int]int{}
	for _, h := range held {
		hist[h]++
		most = max(most, h)
		if h > limit {
			over++
		}
	}
	return over, most, hist
}
