package orders

import (
	"context"
	"errors"
	"time"

	"github.com/quorumlock/quorumlock/internal/failpoint"
	"github.com/quorumlock/quorumlock/orders/request"
	"github.com/quorumlock/quorumlock/orders/store"
)

// verdict says what an answer means for the idempotency record.
type verdict int

const (
	// retryable: nothing was saved; drop the claim so a retry proceeds.
	retryable verdict = iota
	// final: the saved answer of (user, key); record it in Redis.
	final
	// unknown: the outcome is in doubt; keep the claim, so the attempt
	// after its lease expires asks Postgres first.
	unknown
)

// placed is what placing one order came to: its answer, what the answer
// means for the idempotency record, and what the request's log line says
// of it.
type placed struct {
	a   answer
	v   verdict
	log placeLog
}

// placeLog is what one placement did, for the request's log line.
type placeLog struct {
	result   string        // the orders_place_total label
	attempts int           // transactions tried (a stale fence retries)
	batch    int           // orders in the transaction
	queued   time.Duration // how long the request waited for its turn
	fallback string        // set when the lock could not be had: db or reject
	soldOut  bool          // answered from the sold-out report, without the lock
	lock     *lockLog      // the lease the transaction ran under, if any
}

// lockLog is a lease as the log shows it.
type lockLog struct {
	LeaseDetail
	key       string
	acquire   time.Duration // how long Lock took, won or not
	remaining time.Duration // validity left when the release began
	unlock    string        // released, unconfirmed, lost, error
}

// place places one order: in its product's queue when the service has a
// locker, alone otherwise.
func (s *Service) place(ctx context.Context, productID string, req store.OrderRequest) placed {
	if s.queues != nil {
		return s.queues.join(ctx, productID, req, nil)
	}
	return s.placeAlone(ctx, productID, req)
}

// placeAlone runs one order's own transaction, Postgres arbitrating alone,
// once admitted.
func (s *Service) placeAlone(ctx context.Context, productID string, req store.OrderRequest) placed {
	return s.admit(ctx, func(log placeLog) placed {
		res := s.transact(ctx, productID, []store.OrderRequest{req}, nil, &log)
		return s.outcome(ctx, productID, req, res[0], log)
	})
}

// admit runs place once a place is free among the placements under way
// (one per pool connection); a request that finds none within the queue
// wait, or finds the queue limit reached, is answered 503, having written
// nothing.
func (s *Service) admit(ctx context.Context, place func(placeLog) placed) placed {
	start := time.Now()
	if s.waiting.Add(1) > int64(s.queueLimit) {
		s.waiting.Add(-1)
		return s.unplaced(placeLog{result: "shed"}, "too many requests wait; retry")
	}
	t := time.NewTimer(s.queueWait)
	defer t.Stop()
	var gone placed
	select {
	case s.admitted <- token{}:
	case <-ctx.Done():
		gone = s.unplaced(placeLog{result: "cancelled"}, "request cancelled or out of time")
	case <-t.C:
		gone = s.unplaced(placeLog{result: "shed"}, "the order service is busy; retry")
	}
	s.waiting.Add(-1)
	if gone.a.kind != 0 {
		return gone
	}
	defer func() { <-s.admitted }()
	return place(placeLog{batch: 1, queued: time.Since(start)})
}

// unplaced is the 503 of a request that wrote nothing.
func (s *Service) unplaced(log placeLog, detail string) placed {
	s.metrics.place(log.result)
	return placed{a: answer{kind: kindUnavailable, detail: detail, wait: s.retry}, v: retryable, log: log}
}

// txResult is one order's result of a transaction: its store result, or
// the error of the whole transaction.
type txResult struct {
	store.Placed
	err error
}

// transact places reqs in one transaction, fenced by lease (nil: Postgres
// takes the fence itself), retrying a stale fence is the caller's. It
// reports what it did in log.
func (s *Service) transact(ctx context.Context, productID string, reqs []store.OrderRequest, lease Lease, log *placeLog) []txResult {
	batch := make([]*ticket, len(reqs))
	for i, r := range reqs {
		batch[i] = &ticket{req: r, items: []request.Line{{ProductID: productID, Quantity: int(r.Quantity)}}}
	}
	return s.transactCarts(ctx, batch, lease, log)
}

// outcome turns one order's transaction result into its placement.
func (s *Service) outcome(ctx context.Context, product string, req store.OrderRequest, r txResult, log placeLog) placed {
	p := placed{log: log}
	err := r.err
	if err == nil {
		err = r.Err
	}
	switch {
	case err == nil || errors.Is(err, store.ErrOutOfStock):
		p.a, p.v = answer{kind: kindOutcome, out: r.Outcome}, final
		p.log.result = "created"
		switch {
		case r.Outcome.Replayed:
			p.log.result = "replayed"
		case err != nil:
			p.log.result = "out_of_stock"
		default:
			s.failpoints.Hit(failpoint.AfterCommit)
		}
	case errors.Is(err, store.ErrFingerprintMismatch):
		p.a, p.log.result = answer{kind: kindKeyReused}, "fingerprint_mismatch"
	case errors.Is(err, store.ErrUnknownProduct):
		p.a, p.log.result = answer{kind: kindUnknownProduct, product: product}, "unknown_product"
	case errors.Is(err, store.ErrStaleFence):
		p.a, p.log.result = answer{kind: kindUnavailable, detail: "the stock changed hands during the request; retry", wait: s.retry}, "stale_fence"
	case errors.Is(err, store.ErrInvalid):
		// The request was validated already: a wiring fault, not the
		// client's.
		s.log.Error("place order refused its input", "err", err)
		p.a, p.log.result = answer{kind: kindInternal, detail: "the order could not be placed"}, "invalid"
	default:
		// The transaction failed in a way that may or may not have
		// committed. Postgres can tell.
		s.log.Error("place order failed", "err", err)
		p.a, p.v = s.ambiguous(ctx, req)
		p.log.result = "error"
	}
	s.metrics.place(p.log.result)
	return p
}

// ambiguous answers after a transaction whose commit is in doubt.
func (s *Service) ambiguous(ctx context.Context, req store.OrderRequest) (answer, verdict) {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	out, err := s.store.Lookup(lctx, req.UserID, req.IdempotencyKey)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return answer{kind: kindUnavailable, detail: "the order could not be placed; retry with the same Idempotency-Key", wait: s.retry}, retryable
	case err == nil && out.Fingerprint == req.Fingerprint:
		return answer{kind: kindOutcome, out: out}, final
	case err == nil:
		return answer{kind: kindKeyReused}, retryable
	}
	wait := s.retry
	if s.idem != nil {
		wait = s.idem.Lease() // the kept claim sends the next attempt to Postgres after its lease
	}
	return answer{kind: kindOutcomeUnknown, wait: wait}, unknown
}
