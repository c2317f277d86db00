package main

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/wait"
)

// singleNode is the classic one-master lock: SET NX PX with a random token,
// released by a compare-and-delete script. It is the baseline every
// Redlock client pays for: one round trip per operation, no majority.
type singleNode struct {
	c      redis.UniversalClient
	ttl    time.Duration
	unlock *redis.Script
}

//go:embed unlock.lua
var compareAndDelete string

func newSingleNode(c redis.UniversalClient, ttl time.Duration) *singleNode {
	return &singleNode{c: c, ttl: ttl, unlock: redis.NewScript(compareAndDelete)}
}

var errHeld = errors.New("single-node: held by another owner")

// singleHeld is a key singleNode holds, with the token that proves it.
type singleHeld struct {
	s          *singleNode
	key, token string
}

// Unlock deletes the key if it still holds this owner's token.
func (h *singleHeld) Unlock(ctx context.Context) error {
	n, err := h.s.unlock.Run(ctx, h.s.c, []string{h.key}, h.token).Int()
	if err == nil && n != 1 {
		err = errors.New("single-node: unlock not confirmed")
	}
	return err
}

// tryLock makes one SET NX PX attempt; it fails with errHeld when another
// owner holds key.
func (s *singleNode) tryLock(ctx context.Context, key string) (held, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	token := hex.EncodeToString(b[:])
	ok, err := s.c.SetNX(ctx, key, token, s.ttl).Result()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errHeld
	}
	return &singleHeld{s: s, key: key, token: token}, nil
}

// Backoff of singleNode.lock: a full-jitter exponential backoff of the same
// shape and bounds as quorumlock's defaults (a random delay below
// base<<attempt, capped), so the contended scenarios compare the locks and
// not two retry policies.
const (
	singleBaseDelay = 10 * time.Millisecond
	singleMaxDelay  = 500 * time.Millisecond
)

// lock retries tryLock while the key is held, until it succeeds, ctx ends
// or maxWait has passed.
func (s *singleNode) lock(ctx context.Context, key string, maxWait time.Duration) (held, error) {
	deadline := time.Now().Add(maxWait)
	for attempt := 0; ; attempt++ {
		h, err := s.tryLock(ctx, key)
		if !errors.Is(err, errHeld) {
			return h, err
		}
		limit := min(singleMaxDelay, singleBaseDelay<<min(attempt, 16))
		d := time.Duration(mrand.Int64N(int64(limit)))
		if time.Now().Add(d).After(deadline) {
			return nil, fmt.Errorf("single-node: gave up after %d attempts: %w", attempt+1, err)
		}
		if err := wait.Sleep(ctx, d); err != nil {
			return nil, err
		}
	}
}

// pair is one uncontended lock+unlock.
func (s *singleNode) pair(ctx context.Context, key string) error {
	h, err := s.tryLock(ctx, key)
	if err != nil {
		return err
	}
	return h.Unlock(ctx)
}
