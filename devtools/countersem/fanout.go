package countersem

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/lease"
)

// admitAll asks every node at once to admit token, each call bounded by
// the node timeout, and returns each node's answer.
func (s *Semaphore) admitAll(ctx context.Context, token string) (admitted []bool, errs []error) {
	admitted, errs = make([]bool, len(s.nodes)), make([]error, len(s.nodes))
	delays := make([]time.Duration, len(s.nodes))
	if s.cfg.sendDelay != nil {
		for i := range delays {
			delays[i] = s.cfg.sendDelay(i)
		}
	}
	var wg sync.WaitGroup
	for i, c := range s.nodes {
		wg.Go(func() {
			if err := pause(ctx, delays[i]); err != nil {
				errs[i] = err
				return
			}
			nctx, cancel := context.WithTimeout(ctx, s.cfg.nodeTimeout)
			defer cancel()
			n, err := admitScript.Run(nctx, c, []string{s.name}, s.limit, token, s.cfg.ttl.Milliseconds()).Int()
			admitted[i], errs[i] = err == nil && n == 1, err
		})
	}
	wg.Wait()
	return admitted, errs
}

// pause waits d, or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// release removes token from the nodes marked in which, at once, each call
// bounded by the node timeout. It fails with lease.ErrUnlockUnconfirmed
// when fewer than a majority of the nodes asked confirmed.
func (s *Semaphore) release(ctx context.Context, token string, which []bool) error {
	errs := make([]error, len(s.nodes))
	asked := 0
	var wg sync.WaitGroup
	for i, c := range s.nodes {
		if !which[i] {
			continue
		}
		asked++
		wg.Go(func() {
			nctx, cancel := context.WithTimeout(ctx, s.cfg.nodeTimeout)
			defer cancel()
			errs[i] = c.ZRem(nctx, s.name, token).Err()
		})
	}
	wg.Wait()
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
		}
	}
	if asked > 0 && asked-failed < asked/2+1 {
		return fmt.Errorf("countersem: %s: release confirmed by %d of %d nodes: %w", s.name, asked-failed, asked,
			errors.Join(append([]error{lease.ErrUnlockUnconfirmed}, errs...)...))
	}
	return nil
}
