package orders

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/orders/idem"
	"github.com/quorumlock/quorumlock/orders/request"
)

// requestLog is what one POST /orders did, as the flow returns it: the
// claim (and what its record must become), and the placement.
type requestLog struct {
	idem     string   // the idempotency claim's outcome, "UNAVAILABLE", or "off"
	claimKey idem.Key // the claim's record
	owner    string   // this attempt's owner of the record
	claimed  bool     // the record is this attempt's to settle
	verdict  verdict  // what the record must become
	place    placeLog
}

// logRequest writes the request's line: who asked, the idempotency outcome,
// the placement (result, batch, queue wait, sold-out answer) and the lock
// it ran under (key, token digest, fence, acquire time, lease left at
// release, unlock result), and the answer. The token itself never reaches
// the log.
func (s *Service) logRequest(ctx context.Context, rl requestLog, user string, key request.Key, o request.Order, r Reply, d time.Duration) {
	level := slog.LevelInfo
	if r.Status >= 500 {
		level = slog.LevelWarn
	}
	if !s.log.Enabled(ctx, level) {
		return
	}
	p := rl.place
	attrs := make([]slog.Attr, 0, 14)
	attrs = append(attrs,
		slog.String("user", user),
		slog.String("idempotency_key", key.String()),
		productAttr(o),
		slog.Int("status", r.Status),
		slog.String("idempotency", rl.idem),
	)
	if p.result != "" {
		attrs = append(attrs, slog.String("result", p.result))
	}
	if p.attempts > 1 {
		attrs = append(attrs, slog.Int("attempts", p.attempts))
	}
	if p.batch > 1 {
		attrs = append(attrs, slog.Int("batch", p.batch))
	}
	if p.queued > 0 {
		attrs = append(attrs, slog.Duration("queued", p.queued))
	}
	if p.soldOut {
		attrs = append(attrs, slog.Bool("sold_out", true))
	}
	if p.lock != nil {
		attrs = append(attrs, slog.Group("lock", lockAttrs(p.lock)...))
	}
	if p.fallback != "" {
		attrs = append(attrs, slog.String("fallback", p.fallback))
	}
	if r.Header.Get(HeaderReplayed) == "true" {
		attrs = append(attrs, slog.Bool("replayed", true))
	}
	attrs = append(attrs, slog.Duration("duration", d))
	s.log.LogAttrs(ctx, level, "order request", attrs...)
}

// lockAttrs are a lease's log attributes.
func lockAttrs(l *lockLog) []any {
	lock := []any{slog.String("key", l.key), slog.Duration("acquire", l.acquire)}
	if l.TokenDigest != "" {
		lock = append(lock, slog.String("token", l.TokenDigest))
	}
	if l.Fence != 0 {
		lock = append(lock, slog.Int64("fence", l.Fence))
	}
	if l.unlock != "" {
		lock = append(lock, slog.Duration("remaining", l.remaining), slog.String("unlock", l.unlock))
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
