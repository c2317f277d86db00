package create

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/quorumlock/quorumlock/internal/failpoint"
	"github.com/quorumlock/quorumlock/orders/idem"
	"github.com/quorumlock/quorumlock/orders/internal/answer"
	"github.com/quorumlock/quorumlock/orders/internal/placement"
	"github.com/quorumlock/quorumlock/orders/request"
	"github.com/quorumlock/quorumlock/orders/store"
)

// Create decides the create request o of user under the client's
// idempotency key: the Redis claim first, then the order's placement; then
// it settles the claim with the answer. It never fails: every outcome is an
// answer. It reads, top to bottom, as the README's "How one request is
// decided".
//
// The key was checked where it entered (request.IdempotencyKey); user is
// the token's subject.
func (f *Flow) Create(ctx context.Context, user string, key request.Key, o request.Order) (answer.Answer, Log) {
	a, l := f.decide(ctx, user, key, o)
	if l.claimed {
		f.settle(ctx, l, a)
	}
	f.Failpoints.Hit(failpoint.AfterSuccess)
	return a, l
}

// decide decides a create request and returns the answer and the
// request's log, which says what the claim record must become.
func (f *Flow) decide(ctx context.Context, user string, key request.Key, o request.Order) (answer.Answer, Log) {
	l := Log{Idem: "off"}
	if key.IsZero() {
		return answer.Answer{Kind: answer.BadKey, Detail: "the Idempotency-Key header is required"}, l
	}
	k, err := idem.NewKey(user, key)
	if err != nil {
		// A user id the token verifier would not accept: a wiring fault,
		// not the client's.
		f.Log.Error("idempotency key refused", "err", err)
		return answer.Answer{Kind: answer.Internal, Detail: "the request could not be keyed"}, l
	}
	fp := o.Fingerprint()
	l.claimKey, l.owner = k, idem.NewOwner()
	if a, done := f.claim(ctx, &l, key, fp); done {
		return a, l
	}
	f.Failpoints.Hit(failpoint.AfterClaim)
	id, err := newOrderID()
	if err != nil {
		f.Log.Error("order id", "err", err)
		l.Verdict = answer.Retryable
		return answer.Answer{Kind: answer.Internal, Detail: "the order could not be placed"}, l
	}
	// The work must end before the processing lease does, or a retry
	// would take the request over while it still runs.
	pctx, cancel := context.WithTimeout(ctx, f.Budget)
	defer cancel()
	req := store.OrderRequest{UserID: user, IdempotencyKey: key, Fingerprint: fp, Quantity: int64(o.Units()), OrderID: id}
	r := f.placer.Place(pctx, placement.Order{Req: req, Lines: o.Lines()})
	l.Place, l.Verdict = r.Log, r.Verdict
	f.Metrics.Place(r.Log.Result)
	if r.Log.Fallback != "" {
		f.Metrics.Fallback(r.Log.Fallback, 1)
	}
	return r.Answer, l
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
