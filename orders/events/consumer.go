package events

import (
	"context"
	"crypto/rand"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/failpoint"
)

// TxHandler applies an event's effect inside tx, the exact consumer's
// transaction, which also records the event consumed. Returning an error
// rolls both back and leaves the message pending, so it is delivered again.
type TxHandler func(ctx context.Context, tx pgx.Tx, e Event) error

// Handler applies an event's effect for an approximate consumer. Returning
// an error leaves the message pending, so it is delivered again.
type Handler func(ctx context.Context, e Event) error

// Filter is the approximate consumers' record of the events a group has
// seen: a Bloom filter, so Seen may say yes for an event never added (a
// false positive, at the filter's rate) but never no for one added.
type Filter interface {
	Seen(ctx context.Context, group, eventID string) (bool, error)
	Add(ctx context.Context, group, eventID string) error
	// Count estimates how many events were added for group (the dedup set's
	// size), or -1 when the filter cannot tell.
	Count(ctx context.Context, group string) (int64, error)
}

// done is the value of a claim key once its event was processed.
const done = "done"

//go:embed scripts/release.lua
var releaseSrc string

// Consumer reads the stream as one member of a consumer group and hands
// each event to its handler, once, however often the stream delivers it.
// Its methods are safe for concurrent use; Run is meant to run once.
type Consumer struct {
	rdb     redis.UniversalClient
	group   string
	name    string
	s       settings
	release *redis.Script

	// exact mode
	db DB
	tx TxHandler
	// approximate mode
	filter Filter
	fn     Handler
}

func newConsumer(rdb redis.UniversalClient, group, name string, opts []Option) (*Consumer, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: a Redis client is required", ErrConfig)
	}
	if group == "" || name == "" || strings.ContainsAny(group, " \n{}") || strings.ContainsAny(name, " \n") {
		return nil, fmt.Errorf("%w: group %q, name %q: both required, without spaces or braces", ErrConfig, group, name)
	}
	s, err := apply(opts)
	if err != nil {
		return nil, err
	}
	if s.claimIdle <= s.block {
		return nil, fmt.Errorf("%w: claim idle (%v) must exceed the read block (%v)", ErrConfig, s.claimIdle, s.block)
	}
	return &Consumer{rdb: rdb, group: group, name: name, s: s, release: redis.NewScript(releaseSrc)}, nil
}

// NewExact returns a consumer in exact mode: a Redis claim per event keeps
// the group's consumers off one event at a time and answers repeats, and h
// runs in a Postgres transaction on db that inserts the UNIQUE row
// (consumer_group, event_id), so a repeat applies nothing even when the
// Redis record is gone. name identifies this consumer in the group; give
// each process its own.
func NewExact(rdb redis.UniversalClient, db DB, group, name string, h TxHandler, opts ...Option) (*Consumer, error) {
	if db == nil || h == nil {
		return nil, fmt.Errorf("%w: exact mode needs a database and a handler", ErrConfig)
	}
	c, err := newConsumer(rdb, group, name, opts)
	if err != nil {
		return nil, err
	}
	c.db, c.tx = db, h
	c.s.metrics.group(group, "redis", "postgres")
	return c, nil
}

// NewApproximate returns a consumer in approximate mode: f says whether the
// group saw an event, and h runs for those it did not. A false positive of
// f skips an event; two consumers on one redelivered message at once may
// both run h. Use it only for effects that tolerate both.
func NewApproximate(rdb redis.UniversalClient, f Filter, group, name string, h Handler, opts ...Option) (*Consumer, error) {
	if f == nil || h == nil {
		return nil, fmt.Errorf("%w: approximate mode needs a filter and a handler", ErrConfig)
	}
	c, err := newConsumer(rdb, group, name, opts)
	if err != nil {
		return nil, err
	}
	c.filter, c.fn = f, h
	c.s.metrics.group(group, "filter")
	return c, nil
}

// claimKey is the Redis key of the group's claim on one event.
func (c *Consumer) claimKey(eventID string) string {
	return "consumed:{" + c.group + "}:" + eventID
}

// Setup creates the consumer group at the stream's start (and the stream,
// when missing); an existing group is left as it is.
func (c *Consumer) Setup(ctx context.Context) error {
	err := c.rdb.XGroupCreateMkStream(ctx, c.s.stream, c.group, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("events: consumer group %s: %w", c.group, err)
	}
	return nil
}

// Poll runs one round: it takes over messages idle longer than the claim
// idle time (XAUTOCLAIM), then reads new ones (XREADGROUP, waiting up to
// the block time), and handles each. It returns how many messages it
// handled. Call Setup first.
func (c *Consumer) Poll(ctx context.Context) (int, error) {
	n := 0
	claimed, _, deleted, err := c.rdb.XAutoClaimWithDeleted(ctx, &redis.XAutoClaimArgs{
		Stream: c.s.stream, Group: c.group, Consumer: c.name,
		MinIdle: c.s.claimIdle, Start: "0-0", Count: int64(c.s.batch),
	}).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("events: %s/%s: xautoclaim: %w", c.group, c.name, err)
	}
	// Pending messages whose entries MAXLEN trimmed away: Redis drops them
	// from the group, and their events are lost to it. Say so loudly; the
	// outbox table still has them.
	for _, id := range deleted {
		c.trimmed(id)
	}
	for _, m := range claimed {
		c.handle(ctx, m)
		n++
	}
	read, _ := c.read(ctx, ">")
	return n + read, nil
}

// read reads and handles one batch after id (">": new messages; any other
// id: this consumer's own pending messages after it) and returns how many
// it handled and the id of the last.
func (c *Consumer) read(ctx context.Context, id string) (int, string) {
	block := c.s.block
	if id != ">" {
		block = -1 // no BLOCK argument: the history answers at once
	}
	streams, err := c.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: c.group, Consumer: c.name, Streams: []string{c.s.stream, id},
		Count: int64(c.s.batch), Block: block,
	}).Result()
	if err != nil {
		if !errors.Is(err, redis.Nil) && ctx.Err() == nil {
			c.s.log.Warn("events: read", "group", c.group, "consumer", c.name, "err", err)
		}
		return 0, id
	}
	n, last := 0, id
	for _, st := range streams {
		for _, m := range st.Messages {
			c.handle(ctx, m)
			n, last = n+1, m.ID
		}
	}
	return n, last
}

// history handles this consumer's own pending messages, left by an earlier
// run under the same name, once each: the read moves past every message it
// handled, acknowledged or not.
func (c *Consumer) history(ctx context.Context) {
	for id := "0-0"; ctx.Err() == nil; {
		n, last := c.read(ctx, id)
		if n == 0 {
			return
		}
		id = last
	}
}

// Run creates the group if needed, handles this consumer's own pending
// messages (left by an earlier run under the same name), then polls until
// ctx ends, refreshing the gauges every stats period. It returns nil when
// ctx ends, or the error of Setup.
func (c *Consumer) Run(ctx context.Context) error {
	if err := c.Setup(ctx); err != nil {
		return err
	}
	c.history(ctx)
	var stats time.Time
	for ctx.Err() == nil {
		if time.Since(stats) >= c.s.statsEvery {
			c.refreshStats(ctx)
			stats = time.Now()
		}
		if _, err := c.Poll(ctx); err != nil && ctx.Err() == nil {
			c.s.log.Warn("events: poll", "group", c.group, "consumer", c.name, "err", err)
			select { // a failing Redis: do not spin
			case <-ctx.Done():
			case <-time.After(c.s.block):
			}
		}
	}
	return nil
}

// Stats are a group's figures at one moment.
type Stats struct {
	Pending   int64 // delivered, not acknowledged (XPENDING)
	DedupSize int64 // consumed_events rows of the group, or the filter's estimate; -1: unknown
}

// Stats reads the group's pending count and the size of its dedup set.
func (c *Consumer) Stats(ctx context.Context) (Stats, error) {
	st := Stats{DedupSize: -1}
	p, err := c.rdb.XPending(ctx, c.s.stream, c.group).Result()
	if err != nil {
		return st, fmt.Errorf("events: %s: xpending: %w", c.group, err)
	}
	st.Pending = p.Count
	if c.db != nil {
		if err := c.db.QueryRow(ctx, `SELECT count(*) FROM consumed_events WHERE consumer_group = $1`, c.group).Scan(&st.DedupSize); err != nil {
			return st, fmt.Errorf("events: %s: dedup set size: %w", c.group, err)
		}
	} else if n, err := c.filter.Count(ctx, c.group); err == nil {
		st.DedupSize = n
	}
	return st, nil
}

func (c *Consumer) refreshStats(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, defaultRedisTimeout)
	defer cancel()
	st, err := c.Stats(sctx)
	if err != nil {
		if ctx.Err() == nil {
			c.s.log.Warn("events: stats", "group", c.group, "err", err)
		}
		return
	}
	c.s.metrics.stats(c.group, st.DedupSize, st.Pending)
}

// handle handles one message and acknowledges it when it is done with.
func (c *Consumer) handle(ctx context.Context, m redis.XMessage) {
	if len(m.Values) == 0 {
		// A pending entry read from the history after MAXLEN trimmed it.
		c.trimmed(m.ID)
		c.ack(ctx, m.ID)
		return
	}
	e, err := parse(m)
	if err != nil {
		// Redelivery cannot fix it: drop it, loudly.
		c.s.log.Error("events: malformed message dropped", "group", c.group, "stream_id", m.ID, "err", err)
		c.s.metrics.consume(c.group, "malformed")
		c.ack(ctx, m.ID)
		return
	}
	var result string
	if c.db != nil {
		result = c.exact(ctx, e)
	} else {
		result = c.approximate(ctx, e)
	}
	c.s.metrics.consume(c.group, result)
	if result == "processed" || result == "duplicate" {
		c.ack(ctx, m.ID)
	}
}

// trimmed reports a pending message whose stream entry was trimmed before
// the group acknowledged it.
func (c *Consumer) trimmed(id string) {
	c.s.log.Error("events: a pending message was trimmed from the stream before it was handled; its event is lost to this group (the outbox table still has it)",
		"group", c.group, "stream_id", id)
	c.s.metrics.consume(c.group, "trimmed")
}

func (c *Consumer) ack(ctx context.Context, id string) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), defaultRedisTimeout)
	defer cancel()
	if err := c.rdb.XAck(actx, c.s.stream, c.group, id).Err(); err != nil {
		// The message stays pending and comes back; the dedup absorbs it.
		c.s.log.Warn("events: ack", "group", c.group, "stream_id", id, "err", err)
	}
}

// exact handles e in exact mode and returns the result label.
func (c *Consumer) exact(ctx context.Context, e Event) string {
	key := c.claimKey(e.ID)
	owner := rand.Text()
	rctx, cancel := context.WithTimeout(ctx, defaultRedisTimeout)
	prev, err := c.rdb.SetArgs(rctx, key, owner, redis.SetArgs{Mode: "NX", TTL: c.s.lease, Get: true}).Result()
	cancel()
	claimed := false
	switch {
	case errors.Is(err, redis.Nil): // the key was free: ours now
		claimed = true
		c.s.metrics.lookup(c.group, "redis", false)
	case err != nil:
		// Redis cannot say: Postgres arbitrates alone (a concurrent
		// consumer on the same event blocks on the UNIQUE row, then finds
		// it).
		c.s.log.Warn("events: claim unavailable; Postgres arbitrates", "group", c.group, "event_id", e.ID, "err", err)
	case prev == done:
		c.s.metrics.lookup(c.group, "redis", true)
		return "duplicate"
	default:
		// Another consumer is on it: leave the message pending; it is
		// acknowledged by whoever finishes, or taken over after its lease.
		return "busy"
	}
	dup, err := c.apply(ctx, e)
	switch {
	case err != nil:
		c.s.log.Warn("events: handler failed; the event is delivered again", "group", c.group, "event_id", e.ID, "err", err)
		if claimed {
			c.drop(ctx, key, owner)
		}
		return "failed"
	case dup:
		c.s.metrics.lookup(c.group, "postgres", true)
	default:
		c.s.metrics.lookup(c.group, "postgres", false)
		c.s.failpoints.Hit(failpoint.AfterConsume)
	}
	c.markDone(ctx, key)
	if dup {
		return "duplicate"
	}
	return "processed"
}

// apply runs the handler in a transaction that first inserts the
// consumed_events row. dup is true when the row was there already: the
// event was applied before, and nothing ran.
func (c *Consumer) apply(ctx context.Context, e Event) (dup bool, err error) {
	tx, err := c.db.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil || dup {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	tag, err := tx.Exec(ctx, `INSERT INTO consumed_events (consumer_group, event_id) VALUES ($1, $2)
ON CONFLICT DO NOTHING`, c.group, e.ID)
	if err != nil {
		return false, fmt.Errorf("record consumed: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return true, nil
	}
	if err := c.tx(ctx, tx, e); err != nil {
		return false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("commit: %w", err)
	}
	return false, nil
}

// markDone turns the claim into the done record for the dedup window.
func (c *Consumer) markDone(ctx context.Context, key string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), defaultRedisTimeout)
	defer cancel()
	if err := c.rdb.Set(rctx, key, done, c.s.window).Err(); err != nil {
		// The Postgres row answers the repeat instead.
		c.s.log.Warn("events: done record not written", "group", c.group, "key", key, "err", err)
	}
}

// drop releases this consumer's claim, so that a redelivery proceeds at
// once.
func (c *Consumer) drop(ctx context.Context, key, owner string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), defaultRedisTimeout)
	defer cancel()
	if err := c.release.Run(rctx, c.rdb, []string{key}, owner).Err(); err != nil {
		c.s.log.Warn("events: claim not released; it expires with its lease", "group", c.group, "key", key, "err", err)
	}
}

// approximate handles e in approximate mode and returns the result label.
func (c *Consumer) approximate(ctx context.Context, e Event) string {
	seen, err := c.filter.Seen(ctx, c.group, e.ID)
	if err != nil {
		// The filter cannot say: process (a rare repeat, which this mode
		// tolerates) rather than skip.
		c.s.log.Warn("events: filter unavailable; processing", "group", c.group, "event_id", e.ID, "err", err)
	} else {
		c.s.metrics.lookup(c.group, "filter", seen)
		if seen {
			return "duplicate"
		}
	}
	if err := c.fn(ctx, e); err != nil {
		c.s.log.Warn("events: handler failed; the event is delivered again", "group", c.group, "event_id", e.ID, "err", err)
		return "failed"
	}
	if err := c.filter.Add(ctx, c.group, e.ID); err != nil {
		c.s.log.Warn("events: filter not updated", "group", c.group, "event_id", e.ID, "err", err)
	}
	return "processed"
}
