package orders

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/quorumlock/quorumlock/internal/failpoint"
	"github.com/quorumlock/quorumlock/orders/idem"
	"github.com/quorumlock/quorumlock/orders/request"
	"github.com/quorumlock/quorumlock/orders/store"
)

// Create places the order o for user under the client's idempotency key, or
// answers from what an earlier attempt with the same key saved. It never
// returns an error: every outcome is a Reply. It reads, top to bottom, as
// the README's "How one request is decided".
//
// The key was checked where it entered (request.IdempotencyKey); user is
// the token's subject.
func (s *Service) Create(ctx context.Context, user string, key request.Key, o request.Order) Reply {
	start := time.Now()
	a, rl := s.create(ctx, user, key, o)
	r := s.render(a, key.String())
	if rl.claimed {
		s.settleClaim(ctx, rl.claimKey, rl.owner, r, rl.verdict)
	}
	s.failpoints.Hit(failpoint.AfterSuccess)
	s.logRequest(ctx, rl, user, key, o, r, time.Since(start))
	return r
}

// create decides a create request: the Redis claim first, then the order's
// placement; it returns the answer and the request's log, which says what
// the claim record must become.
func (s *Service) create(ctx context.Context, user string, key request.Key, o request.Order) (answer, requestLog) {
	rl := requestLog{idem: "off"}
	if key.IsZero() {
		return answer{kind: kindBadKey, detail: "the Idempotency-Key header is required"}, rl
	}
	k, err := idem.NewKey(user, key)
	if err != nil {
		// A user id the token verifier would not accept: a wiring fault,
		// not the client's.
		s.log.Error("idempotency key refused", "err", err)
		return answer{kind: kindInternal, detail: "the request could not be keyed"}, rl
	}
	fp := o.Fingerprint()
	rl.claimKey, rl.owner = k, idem.NewOwner()
	if a, done := s.claim(ctx, &rl, key, fp); done {
		return a, rl
	}
	s.failpoints.Hit(failpoint.AfterClaim)
	id, err := newOrderID()
	if err != nil {
		s.log.Error("order id", "err", err)
		rl.verdict = retryable
		return answer{kind: kindInternal, detail: "the order could not be placed"}, rl
	}
	// The work must end before the processing lease does, or a retry
	// would take the request over while it still runs.
	pctx, cancel := context.WithTimeout(ctx, s.budget())
	defer cancel()
	req := store.OrderRequest{UserID: user, IdempotencyKey: key, Fingerprint: fp, Quantity: int64(o.Units()), OrderID: id}
	var p placed
	if o.IsCart() {
		p = s.placeCart(pctx, o.Items, req)
	} else {
		p = s.place(pctx, o.ProductID, req)
	}
	rl.place, rl.verdict = p.log, p.v
	return p.a, rl
}

// claim takes the request's Redis claim. done is true when the claim
// decided the answer (a replay, another attempt in flight, a key reused,
// an outcome Postgres found after a takeover); false when the order must be
// placed, rl.claimed then saying whether the record is this attempt's.
func (s *Service) claim(ctx context.Context, rl *requestLog, key request.Key, fp string) (answer, bool) {
	if s.idem == nil {
		return answer{}, false
	}
	res, err := s.idem.Claim(ctx, rl.claimKey, fp, rl.owner)
	rl.idem = "UNAVAILABLE"
	if err == nil {
		rl.idem = res.Outcome.String()
	}
	s.metrics.claim(rl.idem)
	switch {
	case err != nil && ctx.Err() != nil:
		return answer{kind: kindUnavailable, detail: "request cancelled", wait: s.retry}, true
	case err != nil:
		// The fast path is down: Postgres arbitrates alone. The script
		// may still have run with its reply lost, so the claim is
		// settled anyway; Complete and Release check the owner.
		s.log.Warn("idempotency claim unavailable; Postgres arbitrates", "err", err)
	case res.Outcome == idem.Success:
		rl.place.result = "replayed"
		s.metrics.place("replayed")
		return answer{kind: kindRecord, record: res.Response}, true
	case res.Outcome == idem.InProgress:
		rl.place.result = "in_progress"
		s.metrics.place("in_progress")
		return answer{kind: kindInProgress, wait: res.Lease}, true
	case res.Outcome == idem.FingerprintMismatch:
		rl.place.result = "fingerprint_mismatch"
		s.metrics.place("fingerprint_mismatch")
		return answer{kind: kindKeyReused}, true
	case res.Outcome == idem.Takeover:
		// The previous attempt's processing lease ran out. Postgres says
		// whether it left an outcome before this attempt proceeds.
		if a, done := s.afterTakeover(ctx, rl, key, fp); done {
			return a, true
		}
	}
	rl.claimed = true
	return answer{}, false
}

// afterTakeover checks Postgres for the outcome of an attempt whose
// processing lease expired. done is false when there is provably none, so
// this attempt may proceed.
func (s *Service) afterTakeover(ctx context.Context, rl *requestLog, key request.Key, fp string) (answer, bool) {
	out, err := s.store.Lookup(ctx, rl.claimKey.User(), key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return answer{}, false
	case err != nil:
		// Neither side can tell what the earlier attempt did: say so, and
		// keep the claim, so the next attempt checks again.
		s.log.Error("takeover: outcome unknown", "err", err)
		return answer{kind: kindOutcomeUnknown, wait: s.idem.Lease()}, true
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if out.Fingerprint != fp {
		_ = s.idem.Release(sctx, rl.claimKey, rl.owner)
		rl.place.result = "fingerprint_mismatch"
		s.metrics.place("fingerprint_mismatch")
		return answer{kind: kindKeyReused}, true
	}
	s.metrics.repair()
	s.metrics.place("replayed")
	rl.place.result = "repaired"
	a := answer{kind: kindOutcome, out: out}
	if err := s.idem.Repair(sctx, rl.claimKey, fp, s.render(a, key.String()).saved()); err != nil {
		s.log.Warn("takeover: repair of the idempotency record failed", "err", err)
	}
	return a, true
}

// settleClaim records a final answer in Redis, or drops the claim so that
// a retry can proceed.
func (s *Service) settleClaim(ctx context.Context, k idem.Key, owner string, r Reply, v verdict) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	var err error
	switch v {
	case final:
		err = s.idem.Complete(ctx, k, owner, r.saved())
	case retryable:
		err = s.idem.Release(ctx, k, owner)
	case unknown:
		// Keep the claim: when its lease expires, the next attempt asks
		// Postgres before it proceeds.
	}
	if err != nil {
		// Postgres holds the truth; the next attempt repairs Redis.
		s.log.Warn("idempotency record not updated", "verdict", v, "err", err)
	}
}

// newOrderID returns a random order id: "ord_" followed by 128 random bits
// in hex.
func newOrderID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("orders: order id: %w", err)
	}
	return "ord_" + hex.EncodeToString(b[:]), nil
}
