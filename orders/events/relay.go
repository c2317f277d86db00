package events

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/failpoint"
)

// DB is what the relay and the exact consumers need of Postgres;
// *pgxpool.Pool has it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Relay publishes the outbox (order_events rows not yet sent) to the
// stream. Any number of relays, in any number of processes, may run on one
// database: each row is held by one relay at a time (SKIP LOCKED).
type Relay struct {
	db  DB
	rdb redis.UniversalClient
	s   settings
}

// NewRelay returns a relay from db's outbox to the stream on rdb.
func NewRelay(db DB, rdb redis.UniversalClient, opts ...Option) (*Relay, error) {
	if db == nil || rdb == nil {
		return nil, fmt.Errorf("%w: a database and a Redis client are required", ErrConfig)
	}
	s, err := apply(opts)
	if err != nil {
		return nil, err
	}
	return &Relay{db: db, rdb: rdb, s: s}, nil
}

// PublishOnce publishes one batch of unsent rows, oldest first, and
// returns how many it published. The rows are locked (FOR UPDATE SKIP
// LOCKED) from the read until they are marked sent, so a concurrent relay
// takes others. When the process dies after the XADD and before the
// commit, the rows stay unsent and are published again: the stream then
// holds those events twice, with the same event ids.
func (r *Relay) PublishOnce(ctx context.Context) (n int, err error) {
	tx, err := r.db.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("events: relay: begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	ids, evs, err := readOutbox(ctx, tx, r.s.batch)
	if err != nil {
		return 0, err
	}
	if len(evs) == 0 {
		return 0, tx.Commit(ctx)
	}
	if err := r.durable(ctx); err != nil {
		return 0, err
	}
	sentIDs, streamIDs, perr := r.publish(ctx, ids, evs)
	if len(sentIDs) == 0 {
		return 0, fmt.Errorf("events: relay: publish: %w", perr)
	}
	r.s.failpoints.Hit(failpoint.AfterPublish)
	if _, err := tx.Exec(ctx, `UPDATE order_events e SET sent_at = now(), stream_id = v.sid
FROM unnest($1::bigint[], $2::text[]) AS v(id, sid) WHERE e.id = v.id`, sentIDs, streamIDs); err != nil {
		return 0, fmt.Errorf("events: relay: mark sent: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("events: relay: commit: %w", err)
	}
	r.s.metrics.publish(len(sentIDs))
	if perr != nil {
		return len(sentIDs), fmt.Errorf("events: relay: %d of %d not published: %w", len(evs)-len(sentIDs), len(evs), perr)
	}
	return len(sentIDs), nil
}

// durable returns once the rows the relay read are on the synchronous
// standby: a transaction of its own writes a row of sync_marks (see
// store.AwaitDurable) and commits, which returns only once the standby has
// all the WAL before it, the rows' commits included. A read alone cannot tell: rows whose commit's
// wait for the standby ended without it (its backend terminated, as when
// a primary that lost its standby is stopped) are visible on that primary
// alone, and an event published for them would outlive their order after
// a failover. Where replication is not synchronous, it returns at once.
func (r *Relay) durable(ctx context.Context) error {
	tx, err := r.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("events: relay: durable: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO sync_marks (slot, at) VALUES (pg_backend_pid() % 64, now())
ON CONFLICT (slot) DO UPDATE SET at = EXCLUDED.at`); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return fmt.Errorf("events: relay: durable: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("events: relay: durable: %w", err)
	}
	return nil
}

// readOutbox reads up to batch unsent rows in tx, oldest first, and locks
// them (FOR UPDATE SKIP LOCKED). It returns their row ids and events.
func readOutbox(ctx context.Context, tx pgx.Tx, batch int) ([]int64, []Event, error) {
	rows, err := tx.Query(ctx, `SELECT id, event_id, order_id, type, payload, created_at
FROM order_events WHERE sent_at IS NULL ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`, batch)
	if err != nil {
		return nil, nil, fmt.Errorf("events: relay: read outbox: %w", err)
	}
	var ids []int64
	var evs []Event
	for rows.Next() {
		var (
			id  int64
			e   Event
			typ string
			pl  []byte
		)
		if err := rows.Scan(&id, &e.ID, &e.OrderID, &typ, &pl, &e.CreatedAt); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("events: relay: read outbox: %w", err)
		}
		e.Type, e.Payload = Type(typ), pl
		ids, evs = append(ids, id), append(evs, e)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("events: relay: read outbox: %w", err)
	}
	return ids, evs, nil
}

// publish adds evs (whose outbox rows are ids) to the stream in one round
// trip, and returns the row ids and stream ids of those added, and the
// pipeline's error. An entry whose XADD failed stays unsent; the others
// are marked.
func (r *Relay) publish(ctx context.Context, ids []int64, evs []Event) (sentIDs []int64, streamIDs []string, err error) {
	rctx, cancel := context.WithTimeout(ctx, defaultRedisTimeout)
	cmds, err := r.rdb.Pipelined(rctx, func(p redis.Pipeliner) error {
		for _, e := range evs {
			p.XAdd(rctx, &redis.XAddArgs{Stream: r.s.stream, MaxLen: r.s.maxLen, Approx: true, Values: e.values()})
		}
		return nil
	})
	cancel()
	for i, c := range cmds {
		if sid, err := c.(*redis.StringCmd).Result(); err == nil {
			sentIDs, streamIDs = append(sentIDs, ids[i]), append(streamIDs, sid)
		}
	}
	return sentIDs, streamIDs, err
}

// Lag returns how many outbox rows are unsent and the age of the oldest
// (0 when none).
func (r *Relay) Lag(ctx context.Context) (unsent int64, oldest time.Duration, err error) {
	var age *float64
	err = r.db.QueryRow(ctx, `SELECT count(*), extract(epoch FROM now() - min(created_at))::float8
FROM order_events WHERE sent_at IS NULL`).Scan(&unsent, &age)
	if err != nil {
		return 0, 0, fmt.Errorf("events: relay: lag: %w", err)
	}
	if age != nil && *age > 0 {
		oldest = time.Duration(*age * float64(time.Second))
	}
	return unsent, oldest, nil
}

// PurgeSent deletes up to limit rows sent more than olderThan ago and
// returns how many. The outbox then keeps a bounded history.
func (r *Relay) PurgeSent(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	tag, err := r.db.Exec(ctx, `DELETE FROM order_events WHERE id IN (
SELECT id FROM order_events WHERE sent_at < now() - $1::interval ORDER BY sent_at LIMIT $2)`, olderThan, limit)
	if err != nil {
		return 0, fmt.Errorf("events: relay: purge: %w", err)
	}
	return tag.RowsAffected(), nil
}

// Run publishes until ctx ends: batch after batch while the outbox has
// rows, then one look every interval. It refreshes the lag gauges every
// stats period. A failed round is logged and retried after the interval.
// It returns nil when ctx ends.
func (r *Relay) Run(ctx context.Context) error {
	var stats time.Time // zero: refresh the gauges on the first round
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		n, err := r.PublishOnce(ctx)
		if err != nil && ctx.Err() == nil {
			r.s.metrics.relayError()
			r.s.log.Warn("outbox relay", "err", err)
		}
		if time.Since(stats) >= r.s.statsEvery || stats.IsZero() {
			if unsent, lag, err := r.Lag(ctx); err == nil {
				r.s.metrics.outbox(unsent, lag)
			}
			stats = time.Now()
		}
		wait := r.s.interval
		if err == nil && n == r.s.batch {
			wait = 0 // more rows are likely waiting
		}
		timer.Reset(wait)
	}
}
