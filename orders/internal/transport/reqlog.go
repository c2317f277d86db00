package transport

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/orders/internal/create"
	"github.com/quorumlock/quorumlock/orders/internal/placement"
	"github.com/quorumlock/quorumlock/orders/request"
)

// logRequest writes the request's line: who asked, the idempotency outcome,
// the placement (result, batch, queue wait, sold-out answer) and the lock
// it ran under (key, token digest, fence, acquire time, lease left at
// release, unlock result), and the answer. The token itself never reaches
// the log.
func (api *API) logRequest(ctx context.Context, rl create.Log, user string, key request.Key, o request.Order, r Reply, d time.Duration) {
	level := slog.LevelInfo
	if r.Status >= 500 {
		level = slog.LevelWarn
	}
	if !api.Log.Enabled(ctx, level) {
		return
	}
	p := rl.Place
	attrs := make([]slog.Attr, 0, 14)
	attrs = append(attrs,
		slog.String("user", user),
		slog.String("idempotency_key", key.String()),
		productAttr(o),
		slog.Int("status", r.Status),
		slog.String("idempotency", rl.Idem),
	)
	if p.Result != "" {
		attrs = append(attrs, slog.String("result", p.Result))
	}
	if p.Attempts > 1 {
		attrs = append(attrs, slog.Int("attempts", p.Attempts))
	}
	if p.Batch > 1 {
		attrs = append(attrs, slog.Int("batch", p.Batch))
	}
	if p.Queued > 0 {
		attrs = append(attrs, slog.Duration("queued", p.Queued))
	}
	if p.SoldOut {
		attrs = append(attrs, slog.Bool("sold_out", true))
	}
	if p.Lock != nil {
		attrs = append(attrs, slog.Group("lock", lockAttrs(p.Lock)...))
	}
	if p.Fallback != "" {
		attrs = append(attrs, slog.String("fallback", p.Fallback))
	}
	if r.Header.Get(HeaderReplayed) == "true" {
		attrs = append(attrs, slog.Bool("replayed", true))
	}
	attrs = append(attrs, slog.Duration("duration", d))
	api.Log.LogAttrs(ctx, level, "order request", attrs...)
}

// lockAttrs are a lease's log attributes.
func lockAttrs(l *placement.LockLog) []any {
	lock := []any{slog.String("key", l.Key), slog.Duration("acquire", l.Acquire)}
	if l.TokenDigest != "" {
		lock = append(lock, slog.String("token", l.TokenDigest))
	}
	if l.Fence != 0 {
		lock = append(lock, slog.Int64("fence", l.Fence))
	}
	if l.Unlock != "" {
		lock = append(lock, slog.Duration("remaining", l.Remaining), slog.String("unlock", l.Unlock))
	}
	return lock
}

// productAttr names what the order buys: product_id, or a cart's items as
// "id x quantity" pairs ("7x2,42x1").
func productAttr(o request.Order) slog.Attr {
	if !o.IsCart() {
		return slog.String("product_id", o.ProductID)
	}
	var b strings.Builder
	for i, l := range o.Items {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(l.ProductID)
		b.WriteByte('x')
		b.WriteString(strconv.Itoa(l.Quantity))
	}
	return slog.String("items", b.String())
}
