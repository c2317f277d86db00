package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/lease"
)

// The primitive scenarios' fixed shape.
const (
	// maxPermits bounds P in semaphore-P: both lockers' limit.
	maxPermits = 1024
	// semaphoreWorkers is W in semaphore-P, when the name gives none.
	semaphoreWorkers = 32
	// rwWorkers is the workers of an rw-R-W scenario.
	rwWorkers = 32
	// primitiveHold is how long a permit, a read or a write is held.
	primitiveHold = time.Millisecond
	// electionCandidates is how many candidates an election round runs.
	electionCandidates = 3
)

// parsePrimitive reads the name of a primitive scenario: semaphore-P,
// semaphore-P-W, rw-R-W or election. isPrim reports whether name is of
// that family at all (then ok reports whether it is well formed).
func parsePrimitive(name string) (sc scenario, ok, isPrim bool) {
	switch {
	case name == "election":
		return scenario{name: name, kind: kindElection, workers: electionCandidates}, true, true
	case strings.HasPrefix(name, "semaphore-"):
		parts := strings.Split(strings.TrimPrefix(name, "semaphore-"), "-")
		p, okP := parseWorkers(parts[0])
		w, okW := semaphoreWorkers, true
		if len(parts) == 2 {
			w, okW = parseWorkers(parts[1])
		}
		if len(parts) > 2 || !okP || !okW || p > maxPermits {
			return scenario{}, false, true
		}
		return scenario{name: name, kind: kindSemaphore, permits: p, workers: w, hold: primitiveHold}, true, true
	case strings.HasPrefix(name, "rw-"):
		rs, ws, found := strings.Cut(strings.TrimPrefix(name, "rw-"), "-")
		r, okR := percent(rs)
		w, okW := percent(ws)
		if !found || !okR || !okW || r+w != 100 {
			return scenario{}, false, true
		}
		return scenario{name: name, kind: kindRW, readPct: r, workers: rwWorkers, hold: primitiveHold}, true, true
	}
	return scenario{}, false, false
}

// percent reads a percentage of a scenario name: a decimal 0..100 with no
// sign or leading zero.
func percent(s string) (int, bool) {
	n, err := strconv.Atoi(s)
	return n, err == nil && n >= 0 && n <= 100 && strconv.Itoa(n) == s
}

// primContender is one implementation of a primitive under test. open
// returns, for a fresh name, what one worker calls to acquire (waiting):
// a permit of a semaphore of permits permits, or a read or write lease of
// a read-write lock.
type primContender struct {
	name string
	// unsafe marks a contender known to admit more holders than it has
	// permits (the per-node counter semaphore): its figures are a
	// negative control.
	unsafe bool
	sem    func(name string, permits int) (func(ctx context.Context) (held, error), error)
	rw     func(name string) (lease.RWLock, error)
}

// primitivesOf returns the primitive (lease.Primitives) of the lock
// contender called name in set, or nil when it did not run or has none.
func primitivesOf(set *contenderSet, name string) lease.Primitives {
	for _, c := range set.list {
		if c.name == name {
			return c.prims
		}
	}
	return nil
}

// lockerSemaphore is a contender's semaphore on a Locker's primitives.
func lockerSemaphore(p lease.Primitives) func(string, int) (func(context.Context) (held, error), error) {
	return func(name string, permits int) (func(context.Context) (held, error), error) {
		s, err := p.Semaphore(name, permits)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) (held, error) {
			le, err := s.Acquire(ctx)
			if err != nil {
				return nil, err
			}
			return le, nil
		}, nil
	}
}

// occupancy counts the holders of a primitive at one moment, as the
// workers see it (each counts itself in once acquired and out before it
// releases), and keeps the most seen at once.
type occupancy struct {
	now, most atomic.Int64
}

// enter counts one holder in and returns how many hold now.
func (o *occupancy) enter() int64 {
	n := o.now.Add(1)
	for {
		m := o.most.Load()
		if n <= m || o.most.CompareAndSwap(m, n) {
			return n
		}
	}
}

// leave counts one holder out.
func (o *occupancy) leave() { o.now.Add(-1) }

// counted wraps a held so that its release counts the holder out of o
// first.
type counted struct {
	h    held
	o    *occupancy
	once sync.Once
}

// Unlock counts the holder out, then releases.
func (c *counted) Unlock(ctx context.Context) error {
	c.once.Do(c.o.leave)
	return c.h.Unlock(ctx)
}

// primitiveRun runs one primitive scenario on the direct clients.
func (b *bench) primitiveRun(ctx context.Context, sc scenario) (*scenarioRun, error) {
	switch sc.kind {
	case kindSemaphore:
		return b.runSemaphore(ctx, sc), nil
	case kindRW:
		return b.runRW(ctx, sc), nil
	case kindElection:
		return b.runElection(ctx, sc)
	}
	return nil, fmt.Errorf("%s is not a primitive scenario", sc.name)
}

// primitiveContenders is how many contenders run primitive scenario sc.
func (b *bench) primitiveContenders(sc scenario) int {
	switch sc.kind {
	case kindSemaphore:
		return len(b.semContenders())
	case kindRW:
		return len(b.rwContenders())
	}
	return len(b.electionContenders())
}
