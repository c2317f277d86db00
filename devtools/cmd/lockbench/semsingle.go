package main

import (
	"context"
	"crypto/rand"
	_ "embed" // the single-node semaphore's script
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/wait"
)

//go:embed semaphore.lua
var semaphoreSrc string

// errFull is the single-node semaphore's answer while every permit is held.
var errFull = errors.New("single-node semaphore: every permit is held")

// singleSem is a counting semaphore on one Redis node: a sorted set of
// holders, admitted by one script (semaphore.lua) while fewer than permits
// hold. It is the baseline of the semaphore scenarios, as singleNode is of
// the lock ones: one round trip per attempt, no majority.
type singleSem struct {
	c       redis.UniversalClient
	key     string
	permits int
	ttl     time.Duration
	admit   *redis.Script
}

// newSingleSem returns the semaphore key of permits permits on c, whose
// holders expire ttl after they were admitted.
func newSingleSem(c redis.UniversalClient, key string, permits int, ttl time.Duration) *singleSem {
	return &singleSem{c: c, key: key, permits: permits, ttl: ttl, admit: redis.NewScript(semaphoreSrc)}
}

// singleSemHeld is a permit of a singleSem.
type singleSemHeld struct {
	s     *singleSem
	token string
}

// Unlock removes the holder; a holder already gone (expired) is an error.
func (h singleSemHeld) Unlock(ctx context.Context) error {
	n, err := h.s.c.ZRem(ctx, h.s.key, h.token).Result()
	if err == nil && n != 1 {
		err = errors.New("single-node semaphore: release not confirmed (the permit expired)")
	}
	return err
}

// tryAcquire makes one attempt: errFull when every permit is held.
func (s *singleSem) tryAcquire(ctx context.Context) (held, error) {
	token := rand.Text()
	n, err := s.admit.Run(ctx, s.c, []string{s.key}, s.permits, token, s.ttl.Milliseconds()).Int()
	switch {
	case err != nil:
		return nil, err
	case n != 1:
		return nil, errFull
	}
	return singleSemHeld{s: s, token: token}, nil
}

// acquire retries tryAcquire while every permit is held, with the backoff
// of singleNode.lock (full jitter, the bounds of quorumlock's defaults),
// until it succeeds, ctx ends or maxWait has passed.
func (s *singleSem) acquire(ctx context.Context, maxWait time.Duration) (held, error) {
	deadline := time.Now().Add(maxWait)
	for attempt := 0; ; attempt++ {
		h, err := s.tryAcquire(ctx)
		if !errors.Is(err, errFull) {
			return h, err
		}
		limit := min(singleMaxDelay, singleBaseDelay<<min(attempt, 16))
		d := time.Duration(mrand.Int64N(int64(limit)))
		if time.Now().Add(d).After(deadline) {
			return nil, fmt.Errorf("single-node semaphore: gave up after %d attempts: %w", attempt+1, err)
		}
		if err := wait.Sleep(ctx, d); err != nil {
			return nil, err
		}
	}
}
