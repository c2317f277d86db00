package orders

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/quorumlock/quorumlock/orders/request"
	"github.com/quorumlock/quorumlock/quorum"
)

// leaseDetail is what a lease may tell the request log beyond Lease: the
// digest of its token (never the token) and the end of its validity.
// *quorum.Lease has both.
type leaseDetail interface {
	TokenDigest() string
	Until() time.Time
}

// requestLog gathers what one POST /orders did, for the one line Create
// logs at its end.
type requestLog struct {
	idem     string // the idempotency claim's outcome, "UNAVAILABLE", or "off"
	result   string // how the order transaction ended (the orders_placed_total label)
	attempts int    // order transactions tried (a stale fence retries)
	fallback string // set when the lock quorum was lost: db or reject

	lockKey   string
	token     string        // digest of the lease's token
	fence     int64         // the lease's fence
	acquire   time.Duration // how long Lock took, won or not
	remaining time.Duration // validity left when the release began
	unlock    string        // released, unconfirmed, lost, error; "" before any
}

// placed records the order transaction's outcome in the metrics and rl.
func (s *Service) placed(rl *requestLog, result string) {
	s.metrics.place(result)
	rl.result = result
}

// locked notes a Lock call on key that took d and gave l (nil when it
// failed).
func (rl *requestLog) locked(key string, l Lease, d time.Duration) {
	rl.lockKey, rl.acquire, rl.token, rl.fence = key, d, "", 0
	if l == nil {
		return
	}
	rl.fence = l.Fence()
	if ld, ok := l.(leaseDetail); ok {
		rl.token = ld.TokenDigest()
	}
}

// releasing notes the validity left as the release of l begins.
func (rl *requestLog) releasing(l Lease) {
	if ld, ok := l.(leaseDetail); ok {
		rl.remaining = time.Until(ld.Until())
	}
}

// unlocked notes the result of Unlock.
func (rl *requestLog) unlocked(err error) {
	switch {
	case err == nil:
		rl.unlock = "released"
	case errors.Is(err, quorum.ErrLeaseLost):
		rl.unlock = "lost"
	case errors.Is(err, quorum.ErrUnlockUnconfirmed):
		rl.unlock = "unconfirmed"
	default:
		rl.unlock = "error"
	}
}

// logRequest writes the request's line: who asked, the idempotency outcome,
// the lock (key, token digest, fence, acquire time, lease left at release,
// unlock result) and the answer. The token itself never reaches the log.
func (s *Service) logRequest(ctx context.Context, rl *requestLog, user string, key request.Key, o request.Order, r Reply, d time.Duration) {
	level := slog.LevelInfo
	if r.Status >= 500 {
		level = slog.LevelWarn
	}
	if !s.log.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 12)
	attrs = append(attrs,
		slog.String("user", user),
		slog.String("idempotency_key", key.String()),
		slog.String("product_id", o.ProductID),
		slog.Int("status", r.Status),
		slog.String("idempotency", rl.idem),
	)
	if rl.result != "" {
		attrs = append(attrs, slog.String("result", rl.result))
	}
	if rl.attempts > 1 {
		attrs = append(attrs, slog.Int("attempts", rl.attempts))
	}
	if rl.lockKey != "" {
		lock := []any{slog.String("key", rl.lockKey), slog.Duration("acquire", rl.acquire)}
		if rl.token != "" {
			lock = append(lock, slog.String("token", rl.token))
		}
		if rl.fence != 0 {
			lock = append(lock, slog.Int64("fence", rl.fence))
		}
		if rl.unlock != "" {
			lock = append(lock, slog.Duration("remaining", rl.remaining), slog.String("unlock", rl.unlock))
		}
		attrs = append(attrs, slog.Group("lock", lock...))
	}
	if rl.fallback != "" {
		attrs = append(attrs, slog.String("fallback", rl.fallback))
	}
	if r.Header.Get(HeaderReplayed) == "true" {
		attrs = append(attrs, slog.Bool("replayed", true))
	}
	attrs = append(attrs, slog.Duration("duration", d))
	s.log.LogAttrs(ctx, level, "order request", attrs...)
}
