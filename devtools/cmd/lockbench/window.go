package main

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/wait"
)

// pastWindow waits, for at most window plus 5s, until every node at addrs
// has been up for the restart window by its own clock, as quorum's acquire
// script reckons it (TIME - LASTSAVE - 1s). A younger node votes through
// the restart guard's young-node path, which reads INFO server on every
// granted vote: a transient of the window after each start, which on a bed
// just started would otherwise count as the guard's steady cost in the
// first scenarios of a run (the whole of a short solo-16 run).
// Only the end of parent is an error: past the bound the run goes on (and
// its guard figures may include the transient).
func pastWindow(parent context.Context, addrs []string, window time.Duration) error {
	ctx, cancel := context.WithTimeout(parent, window+5*time.Second)
	defer cancel()
	for _, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1, DisableIdentity: true})
		err := untilUp(ctx, c, window)
		_ = c.Close()
		if err != nil {
			break
		}
	}
	return parent.Err()
}

// untilUp waits until c's node has been up for window (see pastWindow).
func untilUp(ctx context.Context, c *redis.Client, window time.Duration) error {
	for {
		now, err := c.Time(ctx).Result()
		if err != nil {
			return err
		}
		last, err := c.LastSave(ctx).Result()
		if err != nil {
			return err
		}
		up := time.Duration(now.Unix()-last-1) * time.Second
		if up >= window {
			return nil
		}
		if err := wait.Sleep(ctx, window-up); err != nil {
			return err
		}
	}
}
