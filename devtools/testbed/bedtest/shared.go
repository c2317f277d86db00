package bedtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/devtools/testbed"
)

// Shared is one bed that the tests of a package take in turn instead of
// starting one each: a bed of five Redis containers and Postgres takes
// about 2.7 s to start and stop on the docker provider, which a package of
// fifty tests pays fifty times. Declare it in the test package, take it
// with Take in each test that can share, and close it from TestMain after
// m.Run.
//
// Each Take hands the bed over in the state a new bed is in, for what the
// tests of this repository can change: every Redis node running, resumed,
// healed and without latency, its keys and scripts flushed. Postgres is
// left as it is: each test makes its own database (NewDatabase, Migrated).
// A test that fails gives the bed up: it is closed after the test, and the
// next Take starts a new one, so that a failure cannot spill into the next
// test. Tests that need something a shared bed cannot give (young nodes,
// other Options, etcd members, links of their own) start their own with
// Start.
type Shared struct {
	// Options is the shared bed's; Etcd must be 0.
	Options testbed.Options

	mu    sync.Mutex
	bed   *testbed.Bed
	inUse string // the test that holds the bed
}

// Take returns the shared bed for t, starting it on first use, reset as
// Shared says. The tests that share a bed must not run in parallel: Take
// fails t when another test holds it.
func (s *Shared) Take(t testing.TB) *testbed.Bed {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inUse != "" {
		t.Fatalf("bedtest: the shared bed is held by %s: tests on one Shared must not run in parallel", s.inUse)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if s.bed != nil {
		if err := reset(ctx, s.bed); err != nil {
			t.Logf("bedtest: the shared bed could not be reset, starting a new one: %v", err)
			_ = s.bed.Close()
			s.bed = nil
		}
	}
	if s.bed == nil {
		if s.Options.Etcd > 0 {
			t.Fatal("bedtest: a Shared bed has no etcd members")
		}
		b, err := testbed.New(ctx, s.Options)
		if err != nil {
			t.Fatalf("%v", err)
		}
		s.bed = b
	}
	s.inUse = t.Name()
	t.Cleanup(func() { s.giveBack(t) })
	return s.bed
}

// giveBack ends t's hold on the bed, after t's own cleanups (which heal
// what t broke); the bed of a failed test is closed.
func (s *Shared) giveBack(t testing.TB) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inUse = ""
	if !t.Failed() || s.bed == nil {
		return
	}
	if err := s.bed.Close(); err != nil {
		t.Errorf("testbed: close: %v", err)
	}
	s.bed = nil
}

// Close closes the bed, if one was started. Call it from TestMain after
// m.Run, before a goroutine leak check.
func (s *Shared) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bed == nil {
		return nil
	}
	err := s.bed.Close()
	s.bed = nil
	return err
}

// reset puts b's Redis nodes back in a new bed's state.
func reset(ctx context.Context, b *testbed.Bed) error {
	var errs []error
	for _, n := range b.Redis {
		if err := errors.Join(n.Resume(ctx), n.Heal(ctx), n.AddLatency(ctx, 0)); err != nil {
			errs = append(errs, err)
			continue
		}
		c := n.Admin()
		if c.Ping(ctx).Err() != nil {
			// Killed and not restarted: start it again, empty.
			if err := n.Restart(ctx, false); err != nil {
				_ = c.Close()
				errs = append(errs, err)
				continue
			}
			_ = c.Close()
			c = n.Admin()
		}
		if err := errors.Join(c.FlushAll(ctx).Err(), c.ScriptFlush(ctx).Err()); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n.Name(), err))
		}
		_ = c.Close()
	}
	return errors.Join(errs...)
}
