package main

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
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

func (s *singleNode) pair(ctx context.Context, key string) error {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	token := hex.EncodeToString(b[:])
	ok, err := s.c.SetNX(ctx, key, token, s.ttl).Result()
	if err != nil {
		return err
	}
	if !ok {
		return errHeld
	}
	n, err := s.unlock.Run(ctx, s.c, []string{key}, token).Int()
	if err == nil && n != 1 {
		err = errors.New("single-node: unlock not confirmed")
	}
	return err
}
