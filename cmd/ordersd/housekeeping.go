package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/quorumlock/quorumlock/orders/events"
	"github.com/quorumlock/quorumlock/orders/payment"
	"github.com/quorumlock/quorumlock/orders/store"
)

// restocker is told when units of a product come back to its stock
// (orders.Service.Restocked).
type restocker interface {
	Restocked(productID string)
}

// housekeeping is the reaper of one instance. Every interval it cancels
// unpaid orders (CREATED, or PAYMENT_FAILED) older than hold and returns
// their stock (store.ExpireOrders), telling the service which products
// came back; then it deletes saved non-order outcomes older than
// outcomeRetention (store.PurgeOutcomes) and, when relay is not nil, events
// published longer than outboxRetention ago (Relay.PurgeSent).
type housekeeping struct {
	store            *store.Store
	relay            *events.Relay // nil: this instance runs no relay and purges no events
	svc              restocker
	hold             time.Duration
	outcomeRetention time.Duration
	outboxRetention  time.Duration
	every            time.Duration
	log              *slog.Logger
}

// run does a round every interval until ctx ends.
func (h housekeeping) run(ctx context.Context) error {
	t := time.NewTicker(h.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		h.round(ctx)
	}
}

// round expires the unpaid orders past the hold, then purges what is past
// its retention.
func (h housekeeping) round(ctx context.Context) {
	h.expireUnpaid(ctx)
	purge(ctx, h.log, "old request outcomes", func(ctx context.Context, limit int) (int64, error) {
		return h.store.PurgeOutcomes(ctx, h.outcomeRetention, limit)
	})
	if h.relay != nil {
		purge(ctx, h.log, "published events", func(ctx context.Context, limit int) (int64, error) {
			return h.relay.PurgeSent(ctx, h.outboxRetention, limit)
		})
	}
}

// expireUnpaid cancels the unpaid orders past the hold in batches until one
// comes back short, at most 100 batches, and tells the service once per
// product that its stock came back, so that a sold-out report of this
// instance ends at once.
func (h housekeeping) expireUnpaid(ctx context.Context) {
	const batch = 100
	restocked := map[string]bool{}
	for range 100 {
		got, err := h.store.ExpireOrders(ctx, h.hold, batch)
		if err != nil {
			if ctx.Err() == nil {
				h.log.Warn("expire unpaid orders", "err", err)
			}
			return
		}
		for _, o := range got {
			h.log.Info("unpaid order expired; stock returned", "order_id", o.ID, "lines", len(o.Lines), "quantity", o.Quantity)
			for _, l := range o.Lines {
				if !restocked[l.ProductID] {
					restocked[l.ProductID] = true
					h.svc.Restocked(l.ProductID)
				}
			}
		}
		if len(got) < batch {
			return
		}
	}
}

// purge deletes what with del in batches of 1000 until one comes back
// short, at most 100 batches, and logs what it did.
func purge(ctx context.Context, log *slog.Logger, what string, del func(ctx context.Context, limit int) (int64, error)) {
	const batch = 1000
	for range 100 {
		n, err := del(ctx, batch)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("purge "+what, "err", err)
			}
			return
		}
		if n > 0 {
			log.Info(what+" purged", "count", n)
		}
		if n < batch {
			return
		}
	}
}

// logReconcile writes what a reconcile round did: a line per payment it
// settled as failed or left open, with why, and the round's error when no
// payment line carries it.
func logReconcile(log *slog.Logger, rep payment.ReconcileReport, err error) {
	if rep.Paid+rep.Failed > 0 {
		log.Info("reconcile: payments settled", "paid", rep.Paid, "failed", rep.Failed, "rejected", rep.Rejected)
	}
	for _, p := range rep.Open {
		attrs := []any{"payment_request_id", p.RequestID, "order_id", p.OrderID, "attempts", p.Attempts, "reason", p.Reason}
		if p.Err != nil {
			log.Warn("reconcile: payment still open", append(attrs, "err", p.Err)...)
			continue
		}
		log.Info("reconcile: payment still open", attrs...)
	}
	if err != nil && len(rep.Open) == 0 {
		log.Warn("reconcile", "err", err)
	}
}
